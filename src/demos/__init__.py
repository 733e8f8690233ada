"""This repository's demo jobs' shared parts (not in the wheel): their options, the
flights row schema, the pandas references and result checks, and the control files
the benchmark drivers write and the spouts read."""
