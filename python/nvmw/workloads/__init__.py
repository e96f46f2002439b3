"""Workloads: the thesis's RL phases as data (`phases`), serverless trace reading,
synthesis and replay (`traces`), and the YCSB-style generator (`ycsb`)."""
