"""The training algorithms' implementations (see :mod:`rl.strategies.base`); their declarations are
:mod:`rl.algorithms`.

``--algo`` names one of :data:`STRATEGIES` (:data:`rl.algorithms.ALGORITHMS`): ``grpo``, ``dr_grpo`` (:mod:`.group`), ``gigpo``
(:mod:`.gigpo`), ``ppo``, ``awr`` (:mod:`.critic`). A semi-online iteration's credit is
:class:`~rl.strategies.semi_online.SemiOnline` (declared as ``semi-online``, not an ``--algo`` choice: the
run's phase schedule, :class:`rl.plan.Schedule`, picks it), which takes its loss and defaults from the online one.
"""

from rl.strategies.base import STRATEGIES, Batch, Strategy, make_strategy, strategy_class
from rl.strategies.critic import AWR, PPO
from rl.strategies.gigpo import GiGPO
from rl.strategies.group import GRPO, DrGRPO
from rl.strategies.semi_online import SemiOnline

__all__ = ["STRATEGIES", "Batch", "Strategy", "make_strategy", "strategy_class", "GRPO", "DrGRPO", "GiGPO", "PPO", "AWR",
           "SemiOnline"]
