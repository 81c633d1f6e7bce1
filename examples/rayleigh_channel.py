"""I.i.d. Rayleigh fading around the paper's path loss, as a user's channel.

``channel.model="examples.rayleigh_channel:RayleighChannel"``; how to write one:
docs/bring-your-own.md, "Your own channel".
"""

import dataclasses

import numpy as np

from channel import Cell, CellConfig, RoundDraw


class RayleighChannel:
    """The paper's cell (drop, availability, LOS, path loss, shadowing), each gain faded.

    Every round each device's power gain is multiplied by ``|h|^2 ~ Exp(1)``, drawn independently
    of every other device and round (Rayleigh amplitude of unit mean power), so the mean gain is
    the cell's; B* follows from the faded gain. ``rng`` is the run's channel generator, the only
    randomness: the cell draws from it first, then the V fading draws.
    """

    def __init__(self, cell: CellConfig, rng: np.random.Generator) -> None:
        self.cell = Cell(cell, rng)  # the paper's path loss: channel.model names this class
        self.rng = rng

    def draw_round(self, model_bits: float) -> RoundDraw:
        """The cell's round with ``gain_lin`` times V draws of Exp(1) and B* for that gain."""
        draw = self.cell.draw_round(model_bits)
        gain = draw.gain_lin * self.rng.exponential(1.0, draw.num_devices)
        bandwidth = self.cell.config.min_bandwidth_hz(model_bits, gain)
        return dataclasses.replace(draw, gain_lin=gain, min_bandwidth_hz=bandwidth)
