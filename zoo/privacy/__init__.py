"""Differentially private training (DP-SGD): Poisson-sampled fixed-shape batches, clipped per-example
gradients plus Gaussian noise, and `dp-accounting` for the privacy spent. `privacy=none` touches nothing.

config: schema and checks; sampling: Poisson batches; gradients: the step's clipped, noised gradient;
accountant: epsilon and noise from dp-accounting; plan: one run's plan, results record and ε logging.
"""
