"""Squared gradient norms of one layer: per sample, and per group of samples.

The formulas behind :func:`client_app.per_sample_norms.per_sample_grad_norms`. Each function
takes a layer, its input ``a`` (captured by a forward hook) and the gradient ``g`` of the
per-sample losses with respect to its output (captured by a tensor hook during the backward of
the summed loss) and returns, without a backward pass per sample:

* per sample i (``*_sq_norms``): ||dl_i/dW||^2 + ||dl_i/dc||^2, the squared norm of sample i's
  gradient with respect to the layer's weight W and bias c;
* per group (``*_group_sq_norms``): ||sum_{i in group} dl_i/dW||^2 + ||sum_{i in group}
  dl_i/dc||^2, the squared norm of the summed gradient of a group of consecutive samples (the
  batch is ``[N groups x group_size samples]``). With one group this is ||sum_i grad l_i||^2,
  hence b^2 ||g_bar||^2 in sigma-hat (paper eq. (local_est_sigma)); with one group per device
  it is the same quantity for every device of a cohort at once.

Layer formulas (sample i; T output positions, K = input features per position, O outputs):

* ``nn.Linear`` (y_t = W a_t + c, input [b, *, K] flattened to T positions):
  dl_i/dW = sum_t g_t a_t^T, so ||dl_i/dW||_F^2 = sum_{t,t'} (a_t . a_t') (g_t . g_t'),
  which is ||a||^2 ||g||^2 when T = 1; dl_i/dc = sum_t g_t. A group's summed gradient is
  the same sum over the T positions of all its samples: a Linear applied at group_size T
  positions.
* ``nn.Conv2d`` (zero padding): the same with U = unfold(a), shape [K, T],
  K = C_in k_h k_w, T = H_out W_out: y = W_mat U + c, dl_i/dW_mat = G U^T with G [O, T]. A
  group's summed weight gradient is one weight-gradient convolution over its samples.
* ``nn.Conv1d`` (zero padding): a Conv2d of height 1 (input [C_in, 1, L], kernel 1 x k, stride,
  padding and dilation 1 / 0 / 1 in height), so the same formulas with K = C_in k, T = L_out.
* ``nn.GroupNorm``: y = gamma * a_hat + beta per channel, with a_hat the normalised input, so
  dl_i/dgamma_c = sum_s g_cs a_hat_cs and dl_i/dbeta_c = sum_s g_cs over spatial positions s.

Each per-sample weight norm is taken by the cheaper of two routes for the layer's shape: form the
per-sample weight gradients G U^T ([b, O, K], ~ T K O multiply-adds per sample; for a convolution
via one weight-gradient convolution with one group per sample, see :func:`conv_sq_norms`), or
evaluate the double sum through the two T x T Gram matrices U^T U and G^T G (~ T^2 (K + O),
:func:`gram_sq_norms`), which wins when a layer has few output positions (T = 1 for a plain
Linear, 1 to 16 in the deeper ResNet stages on 32 x 32 images). Sums of squares are accumulated
in float64: each row of a per-sample tensor is summed in float32 by torch's cascade (pairwise)
summation, whose relative error, ~1e-7, is below the float32 rounding of the gradients
themselves, and these row sums are accumulated over layers and samples in float64.

Intermediates are formed in chunks that fit :data:`CHUNK_BUDGET_FLOATS`. One module per layer
type; every name below is importable from here.
"""

from client_app.layer_norms.conv import ConvGeometry, conv_group_sq_norms, conv_sq_norms
from client_app.layer_norms.group_norm import group_norm_group_sq_norms, group_norm_sq_norms
from client_app.layer_norms.linear import linear_group_sq_norms, linear_sq_norms
from client_app.layer_norms.weight_matrix import (
    CHUNK_BUDGET_FLOATS,
    gram_sq_norms,
    groups_of,
    row_sq_sums,
    weight_sq_norms,
)

__all__ = [
    "CHUNK_BUDGET_FLOATS",
    "ConvGeometry",
    "conv_group_sq_norms",
    "conv_sq_norms",
    "gram_sq_norms",
    "group_norm_group_sq_norms",
    "group_norm_sq_norms",
    "groups_of",
    "linear_group_sq_norms",
    "linear_sq_norms",
    "row_sq_sums",
    "weight_sq_norms",
]
