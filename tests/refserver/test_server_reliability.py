"""Issue 20 at the HTTP edge: bad parameters are 400s naming them, unexpected errors are JSON 500s on a live
connection, a client that hangs up aborts its request (non-streaming too), and vLLM's OpenAI fields work."""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import httpx
import numpy as np
import pytest
import uvicorn

from conftest import wait_until
from test_server import sample, sse_events

from stallscope.cli import main
from stallscope.engine.request import SamplingParams
from stallscope.refserver.engine import LLMEngine
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.server_thread import ServerThread, free_port


@pytest.fixture(scope="module")
def server():
    with ServerThread(EngineConfig(model="tiny", max_model_len=4096), served_model_name="ref") as srv:
        yield srv


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def metric(client, name: str, **labels) -> float:
    return sample(client.get("/metrics").text, name, **labels)


BAD_PARAMETERS = [
    ('"temperature": 1e309', "temperature"),       # valid JSON, read by Python as +inf
    ('"temperature": NaN', "temperature"),
    ('"temperature": -0.5', "temperature"),
    ('"top_p": 0', "top_p"),
    ('"top_p": 1.5', "top_p"),
    ('"top_p": -Infinity', "top_p"),
    ('"top_k": 0', "top_k"),
    ('"top_k": -2', "top_k"),
    ('"presence_penalty": 2.5', "presence_penalty"),
    ('"frequency_penalty": -3', "frequency_penalty"),
    ('"repetition_penalty": 0', "repetition_penalty"),
    ('"max_tokens": 0', "max_tokens"),
    ('"n": 0', "n"),
    ('"seed": 1.5', "seed"),
    ('"seed": 99999999999999999999', "seed"),
    ('"stop": 5', "stop"),
    ('"stop": ["a", 1]', "stop.list[str].1"),
    ('"include_stop_str_in_output": "yes"', "include_stop_str_in_output"),
]


@pytest.mark.parametrize("field,param", BAD_PARAMETERS, ids=[b[0] for b in BAD_PARAMETERS])
def test_out_of_range_parameters_are_400s_naming_them(client, field, param):
    r = client.post("/v1/completions", content='{"prompt": "x", %s}' % field,
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "BadRequestError"
    assert err["param"].startswith(param.split(".")[0]) and param.split(".")[0] in err["message"]


@pytest.mark.parametrize("field,value", [("top_k", 5), ("presence_penalty", 0.5), ("echo", True),
                                         ("logit_bias", {"65": 10}), ("best_of", 3), ("min_tokens", 4)])
def test_known_fields_the_engine_cannot_honour_are_400s(client, field, value):
    r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, field: value})
    assert r.status_code == 400 and r.json()["error"]["param"] == field
    assert f"`{field}` is not supported" in r.json()["error"]["message"]


def test_completion_logprobs_are_the_models_own(server, client):
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 4, "temperature": 0,
                                             "ignore_eos": True, "logprobs": 3}).json()
    lp = r["choices"][0]["logprobs"]
    # the same greedy tokens from a bare engine with the same weights, and their log-softmax (masked ids excluded)
    engine = LLMEngine(EngineConfig(model="tiny", max_model_len=4096), keep_logits=True)
    engine.add_request("r", engine.tokenizer.encode("hello"), SamplingParams(max_tokens=4, ignore_eos=True))
    tokens = []
    while engine.has_unfinished_requests():
        tokens += [t for out in engine.step()[0] for t in out.new_token_ids]
    mask = engine.model_runner.sampler.mask
    expected = []
    for row, t in zip(engine.logits["r"], tokens):
        z = row.astype(np.float64) + mask
        expected.append(float(z[t] - np.log(np.exp(z - z.max()).sum()) - z.max()))
    assert lp["tokens"] == [engine.tokenizer.token_text(t) for t in tokens]
    assert lp["token_logprobs"] == pytest.approx(expected, abs=1e-9)
    assert all(1 <= len(top) <= 3 and max(top.values()) == pytest.approx(x, abs=1e-12)  # greedy: the likeliest
               for top, x in zip(lp["top_logprobs"], lp["token_logprobs"]))
    assert lp["text_offset"][0] == 0 and len(lp["text_offset"]) == 4


def test_chat_logprobs_with_top_logprobs_plain_and_streamed(client):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "ignore_eos": True,
            "logprobs": True, "top_logprobs": 2}
    content = client.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 3 and all(len(c["top_logprobs"]) == 2 and c["logprob"] <= 0 for c in content)
    assert all(c["bytes"] == list(c["token"].encode()) for c in content)
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as s:
        chunks = [json.loads(e)["choices"][0] for e in sse_events(s)[:-1]]
    assert [len(c["logprobs"]["content"]) for c in chunks] == [1, 1, 1]
    bad = client.post("/v1/chat/completions", json={**body, "logprobs": False})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "top_logprobs"


def test_unknown_fields_are_ignored_with_one_warning(client, caplog):
    with caplog.at_level(logging.WARNING, logger="stallscope.refserver.protocol"):
        r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "frobnicate": 1, "zzz": [1]})
    assert r.status_code == 200
    warnings = [rec.getMessage() for rec in caplog.records if "ignored" in rec.getMessage()]
    assert warnings == ["The following fields were present in the request but ignored: ['frobnicate', 'zzz']"]


def test_unexpected_error_is_a_json_500_and_the_connection_stays_usable(server, client, monkeypatch):
    def broken(text):
        raise RuntimeError("tokenizer exploded")

    client.get("/health")
    monkeypatch.setattr(server.engine.tokenizer, "encode", broken)
    r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json()["error"] == {"message": "internal error: RuntimeError: tokenizer exploded",
                                 "type": "InternalServerError", "param": None, "code": 500}
    assert r.headers.get("connection") != "close"
    monkeypatch.undo()
    assert client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


def test_non_streaming_client_disconnect_aborts_the_request(server, client):
    engine = server.engine
    aborted_before = metric(client, "vllm:request_success_total", finished_reason="abort")
    errors = []

    def hang_up_after_1_s():
        try:
            httpx.post(server.url + "/v1/completions", json={"prompt": "x" * 10, "max_tokens": 4000,
                                                             "ignore_eos": True}, timeout=1.0)
        except httpx.ReadTimeout as exc:  # the client gives up and closes the connection
            errors.append(exc)

    worker = threading.Thread(target=hang_up_after_1_s)
    worker.start()
    wait_until(lambda: engine.kv_cache_manager.num_used_blocks > 0, what="the request to hold KV blocks")
    worker.join(30)
    assert len(errors) == 1
    wait_until(lambda: metric(client, "vllm:kv_cache_usage_perc") == 0.0, what="KV usage back to 0")
    assert engine.kv_cache_manager.num_used_blocks == 0 and not engine.has_unfinished_requests()
    assert metric(client, "vllm:request_success_total", finished_reason="abort") == aborted_before + 1


def greedy_text(client, prompt: str = "hello", max_tokens: int = 24) -> str:
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                             "ignore_eos": True})
    return r.json()["choices"][0]["text"]


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_ends_the_text_and_is_counted_as_stop(client, include):
    full = greedy_text(client)
    stop = full[6:9]
    cut = full.find(stop)
    stops_before = metric(client, "vllm:request_success_total", finished_reason="stop")
    body = {"prompt": "hello", "max_tokens": 24, "temperature": 0, "ignore_eos": True, "stop": ["\x00zz", stop],
            "include_stop_str_in_output": include}
    r = client.post("/v1/completions", json=body).json()
    expected = full[:cut + len(stop)] if include else full[:cut]
    choice = r["choices"][0]
    assert choice["text"] == expected and choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as s:
        chunks = [json.loads(e) for e in sse_events(s)[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    wait_until(lambda: metric(client, "vllm:request_success_total", finished_reason="stop") == stops_before + 2,
               what="both stop-string requests counted under finished_reason=stop")


def test_n_choices_are_separate_engine_requests_with_summed_usage(client):
    one = greedy_text(client, max_tokens=5)
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 5, "temperature": 0, "n": 3,
                                             "ignore_eos": True}).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2] and {c["text"] for c in r["choices"]} == {one}
    assert r["usage"] == {"prompt_tokens": 5, "completion_tokens": 15, "total_tokens": 20}
    msg = [{"role": "user", "content": "hi"}]
    with client.stream("POST", "/v1/chat/completions", json={"messages": msg, "max_tokens": 3, "n": 2,
                                                             "stream": True, "ignore_eos": True}) as s:
        chunks = [json.loads(e)["choices"][0] for e in sse_events(s)[:-1]]
    assert sorted(c["index"] for c in chunks) == [0, 0, 0, 1, 1, 1]
    assert [c["index"] for c in chunks if "role" in c["delta"]] in ([0, 1], [1, 0])


def test_chat_content_as_text_parts(client):
    plain = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 1}).json()
    parts = [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts}],
                                                  "max_tokens": 1})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]
    image = [{"type": "image_url", "image_url": {"url": "http://x"}}]
    bad = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": image}]})
    assert bad.status_code == 400 and "messages.0.content" in bad.json()["error"]["message"]


def test_get_one_model(client):
    assert client.get("/v1/models/ref").json()["id"] == "ref"
    r = client.get("/v1/models/gpt-9")
    assert r.status_code == 404 and r.json()["error"] == {"message": "The model `gpt-9` does not exist.",
                                                          "type": "NotFoundError", "param": "model", "code": 404}


def test_bearer_scheme_in_any_case():
    with ServerThread(EngineConfig(model="tiny", max_model_len=256), api_key="k3y") as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as c:
        for scheme in ("bearer", "BEARER", "Bearer"):
            assert c.get("/v1/models", headers={"Authorization": f"{scheme} k3y"}).status_code == 200
        assert c.get("/v1/models", headers={"Authorization": "Basic k3y"}).status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "bearer k3y2"}).status_code == 401


@pytest.mark.parametrize("argv,warned", [(["--host", "0.0.0.0"], True), (["--host", "0.0.0.0", "--api-key", "k"],
                                                                         False), ([], False)])
def test_public_host_without_api_key_warns(monkeypatch, capsys, argv, warned):
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    assert main(["refserver", "--port", str(free_port("0.0.0.0")), "--max-model-len", "256", *argv]) == 0
    err = capsys.readouterr().err
    assert ("warning: --host 0.0.0.0 without --api-key" in err) is warned
    assert err.count("\n") == int(warned)


POISON_SEED = 666


def test_one_poisoned_request_among_8_streams_fails_alone(server, client, monkeypatch):
    prompts = [f"stream {i}" for i in range(7)]
    expected = [greedy_text(client, p, max_tokens=16) for p in prompts]
    errors_before = metric(client, "vllm:request_success_total", finished_reason="error")
    sampler = server.engine.model_runner.sampler
    real = sampler._sample_one

    def poisoned(row, p, rng):
        if p.seed == POISON_SEED:
            raise FloatingPointError("poisoned sampling row")
        return real(row, p, rng)

    monkeypatch.setattr(sampler, "_sample_one", poisoned)

    async def stream(ac, body):
        async with ac.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            chunks = [json.loads(line[6:]) async for line in r.aiter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        return chunks

    async def all_streams():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as ac:
            bodies = [{"prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": True} for p in prompts]
            bodies.insert(3, {"prompt": "poison", "max_tokens": 16, "temperature": 1.0, "seed": POISON_SEED})
            return await asyncio.gather(*(stream(ac, b) for b in bodies))

    results = asyncio.run(all_streams())
    poisoned_chunks = results.pop(3)
    assert [c["error"]["message"] for chunks in results for c in chunks if "error" in c] == []
    assert poisoned_chunks[-1]["choices"][0]["finish_reason"] == "error"
    texts = ["".join(c["choices"][0]["text"] for c in chunks if c.get("choices")) for chunks in results]
    assert texts == expected
    assert metric(client, "vllm:request_success_total", finished_reason="error") == errors_before + 1


def test_a_request_whose_logprobs_raise_fails_alone_and_the_engine_thread_lives(server, client, monkeypatch):
    expected = greedy_text(client, "neighbour", max_tokens=8)
    errors_before = metric(client, "vllm:request_success_total", finished_reason="error")
    sampler = server.engine.model_runner.sampler
    real = sampler.logprobs

    def broken(row, token, n):
        if n == 3:
            raise ValueError("broken logprobs")
        return real(row, token, n)

    monkeypatch.setattr(sampler, "logprobs", broken)

    async def both():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as ac:
            return await asyncio.gather(*(ac.post("/v1/completions", json={
                "prompt": p, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": n})
                for p, n in [("bad", 3), ("neighbour", 1)]))

    bad, good = (r.json()["choices"][0] for r in asyncio.run(both()))
    assert (bad["finish_reason"], bad["text"]) == ("error", "")
    assert (good["finish_reason"], good["text"], len(good["logprobs"]["tokens"])) == ("length", expected, 8)
    assert metric(client, "vllm:request_success_total", finished_reason="error") == errors_before + 1
    assert server.runner.alive and greedy_text(client, "neighbour", max_tokens=8) == expected
