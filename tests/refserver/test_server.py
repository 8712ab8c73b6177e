"""The reference server over real HTTP (uvicorn on a free loopback port, the real `tiny` engine)."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_until

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.server_thread import ServerThread


@pytest.fixture(scope="module")
def server():
    with ServerThread(EngineConfig(model="tiny", max_model_len=512), served_model_name="ref") as srv:
        yield srv


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def sse_events(response) -> list:
    return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


def sample(text: str, name: str, **labels) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"no sample {name} {labels}")


def wait_for(condition, timeout: float = 20.0, what: str = "condition"):
    return wait_until(condition, timeout, poll=0.02, what=what)


def test_completion_returns_exact_length_and_usage(client):
    r = client.post("/v1/completions", json={"model": "ref", "prompt": "hello", "max_tokens": 7,
                                             "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "ref"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


def test_prompt_as_token_ids(client):
    r = client.post("/v1/completions", json={"prompt": [72, 105, 33], "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 3


def test_stream_sends_one_chunk_per_output_then_usage_and_done(client):
    body = {"prompt": "abc", "max_tokens": 6, "stream": True, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    with_choices = [c for c in chunks if c["choices"]]
    assert len(with_choices) == 6
    assert [c["choices"][0]["finish_reason"] for c in with_choices] == [None] * 5 + ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert all(c["usage"] is None for c in with_choices)


def test_stream_without_include_usage_has_no_usage(client):
    with client.stream("POST", "/v1/completions", json={"prompt": "a", "max_tokens": 3, "stream": True,
                                                        "ignore_eos": True}) as r:
        events = sse_events(r)
    assert len(events) == 4 and all("usage" not in json.loads(e) for e in events[:-1])


def test_chat_completion_stream_and_plain(client):
    msg = [{"role": "user", "content": "hi"}]
    r = client.post("/v1/chat/completions", json={"messages": msg, "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == 4
    with client.stream("POST", "/v1/chat/completions", json={"messages": msg, "max_tokens": 3, "stream": True,
                                                             "ignore_eos": True}) as r:
        chunks = [json.loads(e) for e in sse_events(r)[:-1]]
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len(chunks) == 3 and chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_models_health_metrics_content_type(client):
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == "ref" and models["data"][0]["max_model_len"] == 512
    assert client.get("/health").status_code == 200
    r = client.get("/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert sample(r.text, "vllm:cache_config_info", block_size="16") == 1.0


BAD_REQUESTS = [
    ("malformed JSON", "{not json", 400, "malformed JSON"),
    ("missing prompt", {"max_tokens": 3}, 400, "prompt"),
    ("mistyped max_tokens", {"prompt": "x", "max_tokens": "three"}, 400, "max_tokens"),
    ("mistyped stream", {"prompt": "x", "stream": "yes"}, 400, "stream"),
    ("max_tokens zero", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens: Input should be greater than or equal to 1"),
    ("max_tokens negative", {"prompt": "x", "max_tokens": -4}, 400, "max_tokens: Input should be greater than or e"),
    ("max_tokens over the limit", {"prompt": "x", "max_tokens": 600}, 400, "max_tokens=600 is too large"),
    ("prompt too long", {"prompt": "x" * 513, "max_tokens": 1}, 400, "maximum context length is 512"),
    ("token id outside vocab", {"prompt": [1, 99999], "max_tokens": 1}, 400, "token ids"),
    ("empty prompt", {"prompt": "", "max_tokens": 1}, 400, "prompt is empty"),
    ("n over 64", {"prompt": "x", "n": 65}, 400, "n: Input should be less than or equal to 64"),
    ("unknown model", {"prompt": "x", "model": "gpt-9"}, 404, "`gpt-9` does not exist"),
]


@pytest.mark.parametrize("case,body,status,message", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_get_openai_error_bodies(client, case, body, status, message):
    content = body if isinstance(body, str) else json.dumps(body)
    r = client.post("/v1/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and message in err["message"] and err["type"]


def test_chat_bad_requests(client):
    r = client.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user"}]})
    assert r.status_code == 400


def test_client_disconnect_aborts_and_frees_blocks(server, client):
    engine = server.engine
    body = {"prompt": "x" * 100, "max_tokens": 400, "stream": True, "ignore_eos": True}
    with client.stream("POST", "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        got = 0
        for line in lines:
            got += line.startswith("data: ")
            if got == 3:
                break
        assert engine.kv_cache_manager.num_used_blocks > 0
    # the response is closed after 3 of 400 chunks: the server must abort the request
    wait_for(lambda: engine.kv_cache_manager.num_used_blocks == 0 and not engine.has_unfinished_requests(),
             what="KV blocks to be freed after the disconnect")
    wait_for(lambda: sample(client.get("/metrics").text, "vllm:kv_cache_usage_perc") == 0.0,
             what="vllm:kv_cache_usage_perc to return to 0")
    text = client.get("/metrics").text
    assert sample(text, "vllm:request_success_total", finished_reason="abort") >= 1


def test_api_key_required_on_v1_only():
    with ServerThread(EngineConfig(model="tiny", max_model_len=256), api_key="s3cret") as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.get("/v1/models").status_code == 401
        r = c.post("/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.json()["error"]["code"] == 401
        ok = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2},
                    headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200


def test_waiting_queue_bound_gives_503_with_retry_after():
    config = EngineConfig(model="tiny", max_model_len=2048, max_num_seqs=1)
    with ServerThread(config, max_waiting=1) as srv, httpx.Client(base_url=srv.url, timeout=30) as c, \
            httpx.Client(base_url=srv.url, timeout=30) as c2:
        long_body = {"prompt": "x", "max_tokens": 2000, "stream": True, "ignore_eos": True}
        with c.stream("POST", "/v1/completions", json=long_body) as running:
            running_lines = running.iter_lines()  # keep a reference: dropping it closes the stream
            next(running_lines)  # the first request is running
            with c2.stream("POST", "/v1/completions", json=long_body) as waiting:
                assert waiting.status_code == 200  # headers sent: it is queued behind the running one
                r = httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                assert "waiting queue is full" in r.json()["error"]["message"]
        wait_for(lambda: srv.engine.kv_cache_manager.num_used_blocks == 0, what="blocks freed")
        text = c.get("/metrics").text
        assert sample(text, "vllm:admission_rejections_total", reason="max_num_queued_reqs") == 1.0
