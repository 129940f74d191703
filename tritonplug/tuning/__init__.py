"""Autotuning records: which configuration a lowering compiles, the records and their file format, and
where they are stored. ``tritonplug.tune`` itself lives in ``tritonplug.tuner``. Internal: no stable import path.
"""
