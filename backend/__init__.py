"""Penumbra's service: REST over the Redis the Spark job reads and writes (docs/service.md).

>>> from backend import Settings, create_app
>>> app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))
>>> sorted(r.path for r in app.routes if r.path.startswith("/api/queries"))[:2]
['/api/queries', '/api/queries/{query_id}']
"""

from .config import Settings
from .main import create_app

__all__ = ["Settings", "create_app"]
