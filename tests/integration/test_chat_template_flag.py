"""--chat-template: a scheduler serving a model without a chat template (stories260K) renders chat
requests with the given file instead, with the model's special tokens: /tokenize of messages gives
the tokens of exactly the text that template makes, and a chat completion through the official
openai client runs on them."""

import os
import tempfile

import pytest

import harness
import openai_http as oh
from harness import STORIES

# A template whose rendering is plain to read off: "user: ...\nassistant:" and so on.
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]
RENDERED = "system: Tell a story.\nuser: Once upon a time\nassistant:"


@pytest.fixture(scope="module")
def served(log_dir):
    path = os.path.join(tempfile.mkdtemp(dir=log_dir), "story.jinja")
    with open(path, "w") as f:
        f.write(TEMPLATE)
    yield from harness.openai_cluster(log_dir, STORIES, scheduler_flags={"chat_template": path})


def test_messages_render_with_the_file(served):
    addr = served.scheduler.http_address
    chat = oh.post(addr, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": True})
    assert chat.status == 200, chat
    # The file renders bos_token as the model's own BOS piece, which /tokenize of messages parses
    # back to its id; the rest is the text above.
    text = oh.post(addr, "/tokenize", {"prompt": RENDERED, "add_special_tokens": True})
    assert text.status == 200, text
    assert chat.json()["tokens"] == text.json()["tokens"]


def test_chat_completion_runs_on_them(served):
    want = oh.post(served.scheduler.http_address, "/tokenize",
                   {"messages": MESSAGES, "add_generation_prompt": True}).json()["count"]
    r = served.client.chat.completions.create(model=served.model, messages=MESSAGES, max_tokens=8,
                                              temperature=0)
    assert r.usage.prompt_tokens == want
    assert r.usage.completion_tokens == 8 and r.choices[0].message.content
