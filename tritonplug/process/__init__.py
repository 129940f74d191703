"""What this process holds between calls: its state (one owner, one ``reset``), its logging, and the jobs
its compile workers run (which need that state). Internal: no stable import path.
"""
