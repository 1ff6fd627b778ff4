"""Iteration simulator (pure)."""

from commsched.sim.timeline import buckets_of, ends_of_plan, iteration_end_s, simulate

__all__ = ["buckets_of", "ends_of_plan", "iteration_end_s", "simulate"]
