"""The lab: experiments that reproduce the thesis on this machine (interference table,
concurrency sweep, calibration, the long-run evaluation, phase runs, simulator fit and
check, the training schedule, device model comparison) built on nvmw.rl, nvmw.control
and nvmw.workloads."""
