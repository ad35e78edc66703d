"""Online RL for GUI agents: rollouts, advantages, losses, SFT, the GRPO trainer (docs/training.md)."""

__guiagent__ = True
