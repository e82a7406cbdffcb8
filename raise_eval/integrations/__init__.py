"""Integrations with training loops: `LikelihoodMonitor` and its `MonitorSettings` for a plain PyTorch loop
(hooks.py), and `SandwichCallback` for Lightning (lightning.py, imported only when Lightning is installed). May
import the protocol packages and the renderers; never the CLI."""
