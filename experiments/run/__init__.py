"""Run and process control.

One federation (the launcher, the in-process engine), runs side by side, the processes they
start, checks before the start, progress lines, resume commands, certificates.
"""
