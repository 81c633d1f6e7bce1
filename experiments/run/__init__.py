"""Run and process control.

One federation (the launcher, the in-process engine), runs side by side, the processes they
start and the guard they run under, checks before the start, progress lines, resume commands,
Ray clusters, certificates.
"""
