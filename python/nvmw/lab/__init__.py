"""The lab: workload generators, device emulation, sweeps and experiments that
reproduce the thesis on this machine."""
