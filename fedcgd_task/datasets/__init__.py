"""Data sets behind one contract: the built-in image and MNIST-1D sets and the researcher's own.

The run-config key ``dataset`` names a *data-set function*: a built-in name, the keys of
:data:`BUILTIN_DATASETS` (``digits``, ``cifar10``, ``cifar100``, ``mnist1d``), or a reference to
the researcher's function, ``package.module:function`` or ``/absolute/path/file.py:function``
(:func:`fedcgd_task.imports.import_object`). Built-in or not, every data-set function follows
the same contract:

* it takes no argument, or keyword arguments among :data:`DATA_KEYWORDS` (its signature says
  which): ``data_dir``, the run config's ``data-dir`` as an absolute path, and ``settings``, the
  run's validated :class:`fedcgd_task.settings.TaskSettings`, for data that depend on other
  run-config keys (the built-in ``mnist1d`` reads ``mnist1d-samples`` from it). A function with
  ``**kwargs`` gets ``data_dir``; ``settings`` only goes to a function that names it;
* it returns ``((x_train, y_train), (x_test, y_test))`` or
  ``((x_train, y_train), (x_test, y_test), num_classes)``;
* ``x_train``, ``x_test``: real-valued arrays of shape [N, *input_shape] with at least one
  input dimension and the same input shape in both sets (anything :func:`numpy.asarray`
  reads; integer and bool values are converted too), stored as float32, every value finite;
* ``y_train``, ``y_test``: integer arrays of shape [N] (an integer dtype; float labels are
  refused) with labels in [0, num_classes);
* ``num_classes``: an int >= 2; without it, C = the largest label of both sets + 1 (>= 2);
* each set holds at least one sample, and x and y the same number N.

:func:`load_data` calls the function once per process and (dataset, data-dir), and settings
for a function that takes them (cached; the result must be a pure function of its arguments),
checks the result (:func:`check_data`: a one-line ValueError naming the key ``dataset``, its
value and what is allowed) and returns two :class:`DataSplit`. Nothing here branches on a
data-set name: the built-ins are entries of :data:`BUILTIN_DATASETS` like any other function.

The modules, one a job (every name below is also importable from ``fedcgd_task.datasets``):

* :mod:`~fedcgd_task.datasets.contract`: the contract's names and :func:`check_data`, the checks
  of what a data-set function returned;
* :mod:`~fedcgd_task.datasets.loading`: :data:`BUILTIN_DATASETS`, the lookup and call of a
  data-set function, and :func:`load_data` with its per-process cache;
* :mod:`~fedcgd_task.datasets.splits`: :class:`DataSplit`, :class:`ImageSet` and
  :class:`NormalizedPixels` (the built-in image sets keep ``uint8`` pixels and normalise only the
  samples a computation needs);
* :mod:`~fedcgd_task.datasets.digits`: ``digits``, scikit-learn's bundled 8 x 8 digits (fixed
  stratified 80 / 20 split, independent of the run seed);
* :mod:`~fedcgd_task.datasets.cifar`: ``cifar10`` / ``cifar100`` from the data folder, read by a
  safe unpickler;
* :mod:`~fedcgd_task.datasets.mnist1d`: ``mnist1d``, generated offline from ``mnist1d-samples``
  and cached in the data folder.
"""

from fedcgd_task.datasets.cifar import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR100_MEAN,
    CIFAR100_STD,
    CIFAR_FILES,
    CIFAR_PICKLE_GLOBALS,
    CIFAR_SPLIT_FILES,
    MAX_CIFAR_FILE_BYTES,
    CifarUnpickler,
    cifar10_data,
    cifar100_data,
    first_missing_folder,
    load_cifar,
    missing_cifar_message,
    read_cifar_folder,
)
from fedcgd_task.datasets.contract import (
    DATASET_KEY,
    RETURN_CONTRACT,
    DataFunction,
    LoadedData,
    check_data,
)
from fedcgd_task.datasets.digits import (
    DIGITS_MAX_INTENSITY,
    DIGITS_SPLIT_SEED,
    DIGITS_TEST_FRACTION,
    digits_data,
    load_digits_split,
)
from fedcgd_task.datasets.loading import (
    BUILTIN_DATASETS,
    DATA_KEYWORDS,
    call_dataset_function,
    data_keywords,
    dataset_function,
    default_task_settings,
    load_data,
    load_dataset,
    load_test_set,
    load_train_set,
)
from fedcgd_task.datasets.mnist1d import (
    MNIST1D_CACHE_FORMAT,
    MNIST1D_NUM_CLASSES,
    MNIST1D_UNUSED_ARGS,
    Mnist1dArrays,
    generate_mnist1d,
    global_random_state_kept,
    load_mnist1d,
    mnist1d_arguments,
    mnist1d_cache_key,
    mnist1d_cache_path,
    mnist1d_content_digest,
    mnist1d_data,
    mnist1d_shapes,
)
from fedcgd_task.datasets.splits import (
    DataSplit,
    ImageSet,
    Inputs,
    NormalizedPixels,
)

__all__ = [
    "BUILTIN_DATASETS",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "CIFAR_FILES",
    "CIFAR_PICKLE_GLOBALS",
    "CIFAR_SPLIT_FILES",
    "DATASET_KEY",
    "DATA_KEYWORDS",
    "DIGITS_MAX_INTENSITY",
    "DIGITS_SPLIT_SEED",
    "DIGITS_TEST_FRACTION",
    "MAX_CIFAR_FILE_BYTES",
    "MNIST1D_CACHE_FORMAT",
    "MNIST1D_NUM_CLASSES",
    "MNIST1D_UNUSED_ARGS",
    "RETURN_CONTRACT",
    "CifarUnpickler",
    "DataFunction",
    "DataSplit",
    "ImageSet",
    "Inputs",
    "LoadedData",
    "Mnist1dArrays",
    "NormalizedPixels",
    "call_dataset_function",
    "check_data",
    "cifar10_data",
    "cifar100_data",
    "data_keywords",
    "dataset_function",
    "default_task_settings",
    "digits_data",
    "first_missing_folder",
    "generate_mnist1d",
    "global_random_state_kept",
    "load_cifar",
    "load_data",
    "load_dataset",
    "load_digits_split",
    "load_mnist1d",
    "load_test_set",
    "load_train_set",
    "missing_cifar_message",
    "mnist1d_arguments",
    "mnist1d_cache_key",
    "mnist1d_cache_path",
    "mnist1d_content_digest",
    "mnist1d_data",
    "mnist1d_shapes",
    "read_cifar_folder",
]
