"""Rewards beyond task checks: progress potentials, reward composition, a VLM judge (docs/judge.md)."""

__guiagent__ = True
