"""Web UI: run dashboards, episode lists, trajectory replay and comparison (Flask).

``create_app(AppConfig(runs=DIR))`` builds the app; ``guiagent ui --runs DIR``
serves it. Data comes only through :class:`guiagent.store.StoreReader`. See
``docs/webui.md`` for the pages and the JSON API.
"""

__guiagent__ = True

from webui.app import AppConfig, create_app

__all__ = ["AppConfig", "create_app"]
