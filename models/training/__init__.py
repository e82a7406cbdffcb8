"""Training: RBMs (CD/PCD), and VAEs (ELBO with Adam)."""
