"""The endpoint's parts without a server: the token file's rules, streamed text held back
inside a UTF-8 character, and a model's chat template."""

from __future__ import annotations

import os

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.serving_http.auth import host_name, read_token_file
from compile_ahead.profiling.serving_http.chat import load_chat_template
from compile_ahead.profiling.serving_http.errors import ApiError
from compile_ahead.profiling.serving_http.requests import ChatMessage
from compile_ahead.profiling.serving_http.text_stream import TextStream

TOKEN = "a-private-token-0123456789"


def _token_file(tmp_path, mode=0o600, text=TOKEN):
    path = tmp_path / "token"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def test_a_private_token_file_is_read(tmp_path):
    assert read_token_file(str(_token_file(tmp_path))) == TOKEN


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_a_token_file_others_may_read_is_refused(tmp_path, mode):
    with pytest.raises(CompileAheadError, match="others may read it"):
        read_token_file(str(_token_file(tmp_path, mode)))


def test_a_token_file_through_a_link_is_refused(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(_token_file(tmp_path))
    with pytest.raises(CompileAheadError, match="symbolic link"):
        read_token_file(str(link))


def test_a_token_file_of_another_owner_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another owner needs root")
    path = _token_file(tmp_path)
    os.chown(path, 4242, -1)
    with pytest.raises(CompileAheadError, match="owned by uid 4242"):
        read_token_file(str(path))


@pytest.mark.parametrize("text", ["short", "has spaces in the middle of it", "é" * 20])
def test_a_weak_or_unsendable_token_is_refused(tmp_path, text):
    with pytest.raises(CompileAheadError, match="at least 16 characters"):
        read_token_file(str(_token_file(tmp_path, text=text)))


def test_a_fifo_or_a_directory_is_no_token_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(CompileAheadError, match="not a regular file"):
        read_token_file(str(fifo))  # O_NONBLOCK: refused, not waited on
    with pytest.raises(CompileAheadError):
        read_token_file(str(tmp_path))


def test_host_names():
    assert host_name("127.0.0.1:8000") == "127.0.0.1"
    assert host_name("LOCALHOST") == "localhost"
    assert host_name("[::1]:80") == "[::1]"
    assert host_name("evil.example:8000") == "evil.example"


class _Bytes:
    """A byte-level decoder: each id is one byte, decoded as Python decodes UTF-8."""

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def test_streamed_text_waits_for_whole_characters():
    text = "añ€😀 ok"
    stream = TextStream(_Bytes())
    pieces = [stream.add(b) for b in text.encode()]
    assert "".join(pieces) + stream.finish() == text
    assert "\ufffd" not in "".join(pieces)
    assert pieces[1:3] == ["", "ñ"]  # held back until the character is whole


def test_streamed_text_gives_a_broken_tail_at_the_end():
    stream = TextStream(_Bytes())
    pieces = [stream.add(b) for b in "a€".encode()[:-1]]
    assert "".join(pieces) == "a"
    assert stream.finish() == "\ufffd"


def test_no_tokenizer_no_text():
    stream = TextStream(None)
    assert stream.add(5) == "" and stream.finish() == ""


def test_chat_template_from_tokenizer_config(tmp_path):
    import json

    template = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": template + "{% if add_generation_prompt %}<assistant>{% endif %}",
                "bos_token": {"content": "<s>"},
            }
        )
    )
    chat = load_chat_template(tmp_path)
    assert chat is not None
    rendered = chat.render([ChatMessage("user", "hi")])
    assert rendered == "<s><user>hi<assistant>"


def test_chat_template_file_wins_and_sandbox_refuses(tmp_path):
    (tmp_path / "chat_template.jinja").write_text(
        "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}"
        "{{ messages[0].content.__class__.__mro__ }}"
    )
    chat = load_chat_template(tmp_path)
    with pytest.raises(ApiError, match="user first"):
        chat.render([ChatMessage("system", "x")])
    with pytest.raises(ApiError, match="failed on them"):  # the sandbox: no Python internals
        chat.render([ChatMessage("user", "x")])


def test_no_template_no_chat(tmp_path):
    assert load_chat_template(tmp_path) is None
    assert load_chat_template(None) is None


def test_a_source_that_names_its_template_is_used_first(tmp_path):
    """A source with chat_template() (a GGUF's, where sources have one) wins over its
    directory; without one, the directory's template."""
    from types import SimpleNamespace

    from compile_ahead.profiling.serving_http.chat import source_chat_template

    (tmp_path / "chat_template.jinja").write_text("dir {{ messages[0].content }}")
    own = ("{{ bos_token }}own {{ messages[0].content }}", {"bos_token": "<s>"})
    gguf_like = SimpleNamespace(chat_template=lambda: own, model_dir=tmp_path)
    assert source_chat_template(gguf_like).render([ChatMessage("user", "x")]) == "<s>own x"
    plain = SimpleNamespace(chat_template=lambda: None, model_dir=tmp_path)
    assert source_chat_template(plain).render([ChatMessage("user", "x")]) == "dir x"
    assert source_chat_template(SimpleNamespace(model_dir=None)) is None
