"""commsched: plan, simulate and apply the gradient-communication schedule of data-parallel training."""

__version__ = "0.1.0"
