"""Training: RBMs (CD/PCD), DBNs (greedy RBM stacks), DBMs (doubled-input pretraining, then mean-field and
persistent-chain joint training), and VAEs (ELBO with Adam)."""
