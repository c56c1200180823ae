"""The Serve application describes itself (issue #13): ``/openapi.json`` declares every request and
response body and every status a route answers, and a schema-driven fuzzer (schemathesis, in-process
over the ASGI app, a fake Triton behind the service) finds no undocumented status, no 5xx and no
body that differs from its schema."""
import collections
import json
import os

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from scripts.paths import build_dir
from scripts.serve import app as serve_app
from scripts.serve.openai_api import SEED_RANGE
from scripts.serve.openai_schema import ErrorResponse, HealthResponse

from fakes import fake_service, routes_answered_by

if os.environ.get("PYTEST_XDIST_WORKER"):  # make test-unit runs this module on its own, without xdist
    pytest.fail("run tests/unit/serve/test_openapi.py without pytest-xdist (-p no:xdist): under pytest 9 "
                "schemathesis gives the tests it makes for each route one node id, and xdist would run one "
                "route of five", pytrace=False)

# Hypothesis keeps its caches in ./.hypothesis unless told: under build/, which git ignores.
set_hypothesis_home_dir(build_dir() / "hypothesis")

POSTS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt"}
SAMPLING = {"max_tokens", "max_completion_tokens", "stream", "stream_options", "stop", "seed", "n", "ignore_eos"}
STATUSES = {"/v1/chat/completions": {"200", "400", "401", "404", "413", "415", "500", "503"},
            "/v1/completions": {"200", "400", "401", "404", "413", "415", "500", "503"},
            "/generate": {"200", "400", "401", "500", "503"}, "/v1/models": {"200", "401"}, "/health": {"200", "503"}}
USER = [{"role": "user", "content": "What does Triton do?"}]


@pytest.fixture(scope="module")
def app():
    with routes_answered_by(fake_service()) as api:
        yield api


@pytest.fixture(scope="module")
def openapi(app):
    with TestClient(app) as http:
        return http.get("/openapi.json").json()


def resolve(openapi, schema):
    while "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


# -- the description ---------------------------------------------------------------------------

@pytest.mark.parametrize("route, text_field", POSTS.items())
def test_post_routes_declare_their_json_body(openapi, route, text_field):
    body = openapi["paths"][route]["post"]["requestBody"]
    assert body["required"] and list(body["content"]) == ["application/json"]
    schema = resolve(openapi, body["content"]["application/json"]["schema"])
    assert {text_field} | SAMPLING <= set(schema["properties"]) and schema["required"] == [text_field]
    options = resolve(openapi, next(s for s in schema["properties"]["stream_options"]["anyOf"] if "$ref" in s))
    assert "include_usage" in options["properties"]
    assert (schema["properties"]["seed"]["minimum"], schema["properties"]["seed"]["maximum"]) == SEED_RANGE


@pytest.mark.parametrize("route", STATUSES)
def test_every_route_declares_its_statuses_and_openais_error_body(openapi, route):
    (operation,) = openapi["paths"][route].values()
    assert set(operation["responses"]) == STATUSES[route]  # no 422: the app answers bad input with OpenAI's 400
    for status, response in operation["responses"].items():
        assert response["description"]
        schema = resolve(openapi, response["content"]["application/json"]["schema"])
        if status != "200" and route != "/health":
            assert schema["properties"]["error"] == {"$ref": "#/components/schemas/ErrorDetail"}
    streamed = operation["responses"]["200"]["content"].get("text/event-stream")
    assert (route in POSTS) == (streamed is not None)
    assert (route != "/health") == (operation.get("security") == [{"bearer": []}, {}])


def test_every_reference_resolves_and_fastapis_422_is_gone(openapi):
    names = {part.split('"')[0] for part in json.dumps(openapi).split("#/components/schemas/")[1:]}
    assert {"ChatCompletionRequest", "CompletionRequest", "ChatCompletionChunk", "ErrorResponse"} <= names
    assert names <= set(openapi["components"]["schemas"])
    assert not {"HTTPValidationError", "ValidationError"} & set(openapi["components"]["schemas"])


# -- the fuzzer --------------------------------------------------------------------------------

# Loaded from the app at import (schemathesis.pytest.from_fixture, the lazy loader, reads pytest's
# private Node._nodeid, which pytest 9 no longer has); the `app` fixture answers the routes.
schema = schemathesis.openapi.from_asgi("/openapi.json", serve_app.api)
ANSWERED: collections.Counter = collections.Counter()


@schema.parametrize()
@settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_the_routes_answer_as_their_schema_says(app, case):
    """Schema-valid and schema-invalid requests (schemathesis' examples, coverage and fuzzing phases)."""
    response = case.call_and_validate(checks=[not_a_server_error, status_code_conformance, response_schema_conformance])
    ANSWERED[case.operation.path, response.status_code] += 1


def test_the_fuzzer_reached_the_service():
    if not ANSWERED:
        pytest.skip("the fuzzing test did not run in this session")
    assert all(ANSWERED[route, 200] for route in STATUSES), ANSWERED
    assert all(ANSWERED[route, 400] for route in [*POSTS, "/generate"]), ANSWERED


# -- what fuzzing brought up: the fuzzer's finding (integral floats) and two inputs the schema --
# -- admits that reviewing it turned up (seeds beyond uint64, lone surrogates) -------------------

@pytest.fixture
def client():
    service = fake_service()
    with routes_answered_by(service) as api, TestClient(api, raise_server_exceptions=False) as http:
        http.service = service
        yield http


def test_an_integer_may_be_written_as_a_float_with_no_fraction(client):
    """JSON Schema's "integer" takes 1.0; the app's strict integers answered such requests with a 400."""
    ok = client.post("/v1/completions", json={"prompt": "Ray", "n": 1.0, "max_tokens": 4.0, "seed": 7.0})
    assert ok.status_code == 200, ok.text
    assert client.service.backend.calls[-1]["max_tokens"][0, 0] == 4
    half = client.post("/v1/completions", json={"prompt": "Ray", "max_tokens": 4.5})
    assert half.status_code == 400 and half.json()["error"]["param"] == "max_tokens"


@pytest.mark.parametrize("seed, sent", [(SEED_RANGE[1], SEED_RANGE[1]), (-1, SEED_RANGE[1]), (SEED_RANGE[0], 1 << 63)])
def test_seeds_of_int64_and_uint64_reach_triton_as_a_uint64(client, seed, sent):
    """A seed beyond uint64 was a 500 (NumPy's OverflowError building random_seed); a negative one
    only worked through NumPy's deprecated wrap-around."""
    assert client.post("/v1/completions", json={"prompt": "Ray", "seed": seed, "max_tokens": 4}).status_code == 200
    assert client.service.backend.calls[-1]["random_seed"][0, 0] == sent


@pytest.mark.parametrize("seed", [SEED_RANGE[1] + 1, SEED_RANGE[0] - 1, 1e300])
def test_a_seed_out_of_range_is_a_400(client, seed):
    r = client.post("/v1/completions", json={"prompt": "Ray", "seed": seed})
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed", r.text
    assert f"from {SEED_RANGE[0]} to {SEED_RANGE[1]}" in r.json()["error"]["message"]


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", '{"prompt": "Ray", "stop": "\\udc00"}'), ("/v1/completions", '{"prompt": "R\\ud800y"}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}')])
def test_a_lone_surrogate_is_a_400(client, route, body):
    """A ``\\ud800`` escape without its pair: a 500 in a stop string (encoding it for Triton), a
    misleading context_length_exceeded in a prompt."""
    r = client.post(route, content=body.encode())
    assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"], r.text
    assert r.json()["error"]["code"] is None and not client.service.backend.calls
    pair = client.post("/v1/completions", content='{"prompt": "R\\ud83d\\ude00y", "max_tokens": 4}'.encode())
    assert pair.status_code == 200, pair.text


def test_triton_failures_answer_as_declared(openapi):
    """What the fuzzer cannot reach over a healthy fake Triton: the 500 and the 503, with the bodies declared."""
    service = fake_service(fail=0)
    service.backend.is_ready = False
    with routes_answered_by(service) as api, TestClient(api) as http:
        health = http.get("/health")
        assert health.status_code == 503 and HealthResponse.model_validate(health.json()).status == "loading"
        for method, route, sent in [("post", "/v1/completions", {"json": {"prompt": "Ray"}}),
                                    ("post", "/v1/chat/completions", {"json": {"messages": USER}}),
                                    ("get", "/generate", {"params": {"query": "Ray", "max_tokens": 4}})]:
            r = getattr(http, method)(route, **sent)
            assert r.status_code == 500 and "500" in openapi["paths"][route][method]["responses"], r.text
            assert ErrorResponse.model_validate(r.json()).error.type == "server_error"
