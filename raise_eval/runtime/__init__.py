"""Run-time concerns, apart from the algorithms: fixed shards and their seeds (sharding.py), resume files
(resume.py), Ctrl-C during a resumable run (interrupts.py), torch.distributed ranks (distributed.py) and torch's
thread count (threads.py). May import the core (estimators, kernels); never the protocol packages, the CLI or the
renderers."""
