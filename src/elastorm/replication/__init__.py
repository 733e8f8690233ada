"""Partially active replication (Su & Zhou 2016): the Output Fidelity model and planners.

Pure functions over plain data: a :class:`~elastorm.replication.model.TaskGraph` in,
a set of tasks to replicate out. See docs/replication.md for the formulas.
"""
