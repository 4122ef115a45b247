"""One real local Ray cluster (2 worker CPUs) for every Ray test in the tests/scale package: one start-up, shut
down after the last Ray test of the package."""

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="package")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 1024 * 1024)
    try:
        yield ray
    finally:
        ray.shutdown()


def rows(store, run_id):
    """A run's stored rows in a canonical order, without the run id and the wall-clock latency (never equal twice)."""
    t = store.results(run_id).drop_columns(["run_id", "latency_ms"])
    return t.sort_by([("query_id", "ascending"), ("trial", "ascending"), ("metric", "ascending")]).to_pylist()


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_port():
    """A plain HTTP server on every interface, not a Ray cluster (Ray dials 127.0.0.1 as this node's address)."""
    server = ThreadingHTTPServer(("", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
