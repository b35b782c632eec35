"""The endpoint's HTTP semantics, with the official openai client (and raw httpx where the
client hides the wire), against tests/fake_engine.py's engine: what each request gets back
equals the fake's own answer for its prompt, refusals are OpenAI-style errors naming the
parameter, and a client that goes away frees its row."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from endpoint_server import MODEL, served
from fake_engine import EOS, EOS_TRIGGER, FakeEngine, expected_tokens


@pytest.fixture
def server():
    engine = FakeEngine()
    with served(engine) as s:
        yield s
    engine.drain(0)


def _auth(s) -> dict[str, str]:
    return {"Authorization": f"Bearer {s.token}"}


def wait_for(condition, timeout=10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# --- completions ---------------------------------------------------------------------------
def test_completion_tokens_and_usage(server):
    prompt = [5, 6, 7]
    r = server.client().completions.create(model=MODEL, prompt=prompt, max_tokens=9)
    tokens, _ = expected_tokens(prompt, 9)
    assert r.choices[0].model_extra["token_ids"] == tokens
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 9, 12)
    assert r.object == "text_completion" and r.model == MODEL


def test_completion_stops_at_eos(server):
    prompt = [EOS_TRIGGER, 1, 2]
    r = server.client().completions.create(model=MODEL, prompt=prompt, max_tokens=50, temperature=0)
    tokens, reason = expected_tokens(prompt, 50)
    assert reason == "eos" and tokens[-1] == EOS
    assert r.choices[0].model_extra["token_ids"] == tokens
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == len(tokens)


def test_completion_stream_ends_with_done(server):
    prompt = [11, 12]
    chunks = list(
        server.client().completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    ids = [t for c in chunks for choice in c.choices for t in choice.model_extra["token_ids"]]
    assert ids == expected_tokens(prompt, 6)[0]
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * 6 + ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    # On the wire: server-sent events, the last one [DONE].
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "stream": True}
    with httpx.stream(
        "POST", f"{server.base_url}/completions", json=body, headers=_auth(server)
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)


def test_prompt_in_a_one_element_list(server):
    r = server.client().completions.create(model=MODEL, prompt=[[4, 4]], max_tokens=2)
    assert r.choices[0].model_extra["token_ids"] == expected_tokens([4, 4], 2)[0]


# --- chat ----------------------------------------------------------------------------------
WORDS = [f"w{i}" for i in range(1000)]
TEMPLATE = (
    "{% for m in messages %}w1 {{ m['role'] }} {{ m['content'] }} w2 {% endfor %}"
    "{% if add_generation_prompt %}w1 assistant{% endif %}"
)


@pytest.fixture
def chat_server():
    from tokenizers import Tokenizer, models, pre_tokenizers

    from compile_ahead.profiling.serving_http.chat import ChatTemplate

    vocab = {w: i for i, w in enumerate(WORDS)} | {"system": 900, "user": 901, "assistant": 902}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    engine = FakeEngine()
    with served(engine, tokenizer=tok, chat_template=ChatTemplate(TEMPLATE, None, None)) as s:
        s.tokenizer = tok
        yield s
    engine.drain(0)


def _chat_prompt(tok, messages) -> list[int]:
    text = "".join(f"w1 {m['role']} {m['content']} w2 " for m in messages) + "w1 assistant"
    return tok.encode(text, add_special_tokens=False).ids


def test_chat_completion(chat_server):
    messages = [{"role": "system", "content": "w7"}, {"role": "user", "content": "w8 w9"}]
    r = chat_server.client().chat.completions.create(
        model=MODEL, messages=messages, max_tokens=5, temperature=0
    )
    prompt = _chat_prompt(chat_server.tokenizer, messages)
    tokens, _ = expected_tokens(prompt, 5)
    assert r.choices[0].model_extra["token_ids"] == tokens
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == chat_server.tokenizer.decode(tokens)
    assert r.usage.prompt_tokens == len(prompt) and r.object == "chat.completion"


def test_chat_stream(chat_server):
    messages = [{"role": "user", "content": [{"type": "text", "text": "w3 w4"}]}]
    chunks = list(
        chat_server.client().chat.completions.create(
            model=MODEL, messages=messages, max_completion_tokens=7, stream=True
        )
    )
    tokens, _ = expected_tokens(_chat_prompt(chat_server.tokenizer, messages), 7)
    assert chunks[0].choices[0].delta.role == "assistant"
    ids = [t for c in chunks for t in c.choices[0].model_extra["token_ids"]]
    assert ids == tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.split() == chat_server.tokenizer.decode(tokens).split()
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_text_completion_uses_the_tokenizer(chat_server):
    r = chat_server.client().completions.create(model=MODEL, prompt="w5 w6", max_tokens=3)
    assert r.choices[0].model_extra["token_ids"] == expected_tokens([5, 6], 3)[0]
    assert r.choices[0].text == chat_server.tokenizer.decode(expected_tokens([5, 6], 3)[0])


def test_chat_without_a_template_is_refused(server):
    with pytest.raises(openai.BadRequestError) as err:
        server.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert err.value.body["code"] == "no_chat_template"


def test_text_without_a_tokenizer_is_refused(server):
    with pytest.raises(openai.BadRequestError) as err:
        server.client().completions.create(model=MODEL, prompt="hello", max_tokens=2)
    assert err.value.body["code"] == "no_tokenizer"


# --- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"temperature": 0.7}, "temperature"),
        ({"top_p": 0.5}, "top_p"),
        ({"n": 2}, "n"),
        ({"logprobs": 1}, "logprobs"),
        ({"best_of": 2}, "best_of"),
        ({"stop": ["w1"]}, "stop"),
        ({"stop": "w1"}, "stop"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"echo": True}, "echo"),
        ({"suffix": "x"}, "suffix"),
        ({"logit_bias": {"5": 10}}, "logit_bias"),
        ({"extra_body": {"top_k": 5}}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"prompt": [[1], [2]]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_unsupported_completion_parameters_are_refused(server, kwargs, param):
    args = {"model": MODEL, "prompt": [1, 2], "max_tokens": 2} | kwargs
    with pytest.raises(openai.BadRequestError) as err:
        server.client().completions.create(**args)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param and err.value.body["message"]
    assert server.engine.submitted == []  # nothing reached the engine


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, "messages"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            "messages",
        ),
        ({"max_tokens": 3, "max_completion_tokens": 4}, "max_completion_tokens"),
    ],
)
def test_unsupported_chat_parameters_are_refused(chat_server, kwargs, param):
    args = {"model": MODEL, "messages": [{"role": "user", "content": "w1"}]} | kwargs
    with pytest.raises(openai.BadRequestError) as err:
        chat_server.client().chat.completions.create(**args)
    assert err.value.body["param"] == param


def test_neutral_parameters_are_accepted(server):
    r = server.client().completions.create(
        model=MODEL,
        prompt=[3],
        max_tokens=2,
        temperature=0,
        top_p=1,
        n=1,
        seed=7,
        user="me",
        stop=[],
    )
    assert r.choices[0].model_extra["token_ids"] == expected_tokens([3], 2)[0]


def test_unknown_model_is_404(server):
    with pytest.raises(openai.NotFoundError) as err:
        server.client().completions.create(model="gpt-4", prompt=[1], max_tokens=1)
    assert err.value.body["code"] == "model_not_found"


def test_beyond_the_context_is_refused(server):
    with pytest.raises(openai.BadRequestError) as err:
        server.client().completions.create(model=MODEL, prompt=[1] * 250, max_tokens=10)
    assert err.value.body["code"] == "context_length_exceeded"
    assert "256" in err.value.body["message"]


def test_ids_beyond_the_vocabulary_are_refused(server):
    with pytest.raises(openai.BadRequestError) as err:
        server.client().completions.create(model=MODEL, prompt=[1, 5000], max_tokens=1)
    assert "5000" in err.value.body["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_refusal_is_an_error_body(server, stream):
    server.engine.refuse = "no bucket fits the memory budget"
    r = httpx.post(
        f"{server.base_url}/completions",
        headers=_auth(server),
        json={"model": MODEL, "prompt": [1, 2], "max_tokens": 1, "stream": stream},
    )
    assert r.status_code == 400  # no stream began: a status and one error body
    assert r.json()["error"]["code"] == "engine_refused"
    assert "no bucket fits the memory budget" in r.json()["error"]["message"]


# --- the wire: malformed, oversized, unauthenticated -----------------------------------------
def test_malformed_json_is_400(server):
    r = httpx.post(
        f"{server.base_url}/completions",
        headers=_auth(server) | {"content-type": "application/json"},
        content=b'{"model": ',
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(f"{server.base_url}/completions", headers=_auth(server), json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]


def test_oversized_bodies_are_413(server):
    big = {"model": MODEL, "prompt": "x" * (2 << 20)}
    r = httpx.post(f"{server.base_url}/completions", headers=_auth(server), json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: counted as it comes
        for _ in range(40):
            yield b"x" * 65536

    r = httpx.post(f"{server.base_url}/completions", headers=_auth(server), content=chunks())
    assert r.status_code == 413


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": "Basic dGVzdA=="}],
)
def test_no_token_or_a_wrong_one_is_401(server, headers):
    for method, path in (
        ("POST", "/v1/completions"),
        ("GET", "/v1/models"),
        ("GET", "/health"),
        ("GET", "/metrics"),
        ("GET", "/no/such/route"),
    ):
        r = httpx.request(
            method, server.url + path, headers=headers, json={"model": MODEL, "prompt": [1]}
        )
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] in ("missing_api_key", "invalid_api_key")
    assert server.engine.submitted == []


def test_openai_client_with_a_wrong_key_is_refused(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_a_foreign_host_name_is_refused(server):
    r = httpx.get(f"{server.url}/v1/models", headers=_auth(server) | {"Host": "evil.example"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"


def test_unknown_route_is_an_openai_404(server):
    r = httpx.get(f"{server.url}/v1/embeddings", headers=_auth(server))
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(f"{server.base_url}/completions", headers=_auth(server))
    assert r.status_code == 405 and "error" in r.json()


# --- models, health, metrics --------------------------------------------------------------
def test_models_health_metrics(server):
    assert [m.id for m in server.client().models.list()] == [MODEL]
    health = httpx.get(f"{server.url}/health", headers=_auth(server))
    assert health.status_code == 200
    assert health.json()["buckets"] == {"compiled": [[1, 256], [4, 256]], "compiling": [[8, 256]]}
    server.client().completions.create(model=MODEL, prompt=[1], max_tokens=1)
    text = httpx.get(f"{server.url}/metrics", headers=_auth(server)).text
    from prometheus_client.parser import text_string_to_metric_families

    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["compile_ahead_engine_ttft_s_p50"].value == 0.01
    assert samples["compile_ahead_http_responses_total"].labels == {
        "route": "/v1/completions",
        "status": "200",
    }
    server.engine.ready = False
    assert httpx.get(f"{server.url}/health", headers=_auth(server)).status_code == 503


def test_draining_refuses_new_requests(server):
    server.endpoint.draining = True
    with pytest.raises(openai.InternalServerError) as err:
        server.client().completions.create(model=MODEL, prompt=[1], max_tokens=1)
    assert err.value.status_code == 503 and err.value.body["code"] == "server_shutdown"


# --- clients that go away, many clients ------------------------------------------------------
def test_a_client_that_disconnects_mid_stream_frees_its_row():
    engine = FakeEngine(step_s=0.02)
    with served(engine) as s:
        body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 200, "stream": True}
        with httpx.stream("POST", f"{s.base_url}/completions", json=body, headers=_auth(s)) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(4)]
            assert got[0].startswith("data: ")
        # The connection is closed with most tokens still to come: the request is cancelled.
        wait_for(lambda: engine.cancelled and engine.running_count() == 0)
        assert engine.cancelled == [engine.submitted[0][0]]
        r = s.client().completions.create(model=MODEL, prompt=[9], max_tokens=2)  # still serves
        assert r.choices[0].model_extra["token_ids"] == expected_tokens([9], 2)[0]
    engine.drain(0)


def test_a_client_that_disconnects_before_a_whole_answer_frees_its_row():
    engine = FakeEngine(step_s=0.02)
    with served(engine) as s:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{s.base_url}/completions",
                headers=_auth(s),
                timeout=0.3,
                json={"model": MODEL, "prompt": [1], "max_tokens": 200},
            )
        wait_for(lambda: engine.cancelled and engine.running_count() == 0)
    engine.drain(0)


def test_concurrent_clients_joining_and_leaving():
    engine = FakeEngine(rows=4, step_s=0.002)
    results: dict[int, tuple] = {}
    with served(engine) as s:
        client = s.client()

        def one(i: int) -> None:
            prompt = [i + 1] * (1 + i % 5)
            n = 3 + 7 * (i % 4)
            if i % 2:
                chunks = client.completions.create(
                    model=MODEL, prompt=prompt, max_tokens=n, stream=True
                )
                ids = [t for c in chunks for t in c.choices[0].model_extra["token_ids"]]
            else:
                r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n)
                ids = r.choices[0].model_extra["token_ids"]
            results[i] = (ids, expected_tokens(prompt, n)[0])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
        for k, t in enumerate(threads):  # 8 at a time, each wave joining as others leave
            t.start()
            if k >= 8:
                threads[k - 8].join(30)
        for t in threads:
            t.join(30)
    engine.drain(0)
    assert sorted(results) == list(range(24))
    for ids, expected in results.values():
        assert ids == expected
    assert engine.peak_running == 4  # the rows were shared by the clients


# --- connections -----------------------------------------------------------------------------
def test_idle_connections_are_closed_and_do_not_block_others():
    import socket

    engine = FakeEngine()
    with served(engine, idle_timeout_s=1.0, max_connections=128) as s:
        port = int(s.url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(100)]
        trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
        trickle.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends
        r = s.client().completions.create(model=MODEL, prompt=[1], max_tokens=1)
        assert r.choices[0].model_extra["token_ids"] == expected_tokens([1], 1)[0]
        for sock in [*idle, trickle]:
            assert sock.recv(1024) == b""  # closed by the server after the idle timeout
            sock.close()
        wait_for(lambda: s.server.connections() == 0)
    engine.drain(0)


def test_connections_beyond_the_limit_get_503():
    engine = FakeEngine(step_s=0.02)
    with served(engine, max_connections=2) as s:
        body = {"model": MODEL, "prompt": [1], "max_tokens": 100, "stream": True}
        url, headers = f"{s.base_url}/completions", _auth(s)
        with (
            httpx.Client() as a,
            httpx.Client() as b,
            a.stream("POST", url, json=body, headers=headers),
            b.stream("POST", url, json=body, headers=headers),
        ):
            r = httpx.get(f"{s.url}/v1/models", headers=headers)
            assert r.status_code == 503
    engine.drain(0)


def test_an_error_event_in_the_engine_ends_the_stream_with_an_error(server):
    """A stream cut by the engine (a cancel it did not get from the client) says so and sends
    no [DONE]."""
    body = {"model": MODEL, "prompt": [1, 2], "max_tokens": 250, "stream": True}
    with httpx.stream(
        "POST", f"{server.base_url}/completions", json=body, headers=_auth(server)
    ) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        server.endpoint.cancel_all()
        rest = [line for line in lines if line]
    assert rest[-1] != "data: [DONE]"
    assert json.loads(rest[-1][len("data: ") :])["error"]["code"] == "server_shutdown"
