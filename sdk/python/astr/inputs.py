"""Python values to astr.v1 request messages: prompts, sampling options and enum names.

The keyword names are the proto field names of generate.proto (SamplingParameters and
GenerateRequest), which documents each; the few extras are for chat input (`tools`,
`continue_final_message`, `template_kwargs`).
"""

from __future__ import annotations

import json
import numbers
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from .v1 import generate_pb2 as pb

if TYPE_CHECKING:
    from typing_extensions import TypedDict, Unpack
else:
    from typing import TypedDict

# One chat message: a ChatMessage, or a mapping with its field names ("role", "content", "name",
# "tool_call_id", "tool_calls_json"; "tool_calls" may be a list, sent as JSON).
ChatMessageLike = Union[pb.ChatMessage, Mapping[str, Any]]
# A prompt: text, token ids (any iterable of ints, e.g. a numpy array), chat messages, or the
# proto's own TokenIds / ChatInput.
Prompt = Union[str, Iterable[int], Iterable[ChatMessageLike], pb.TokenIds, pb.ChatInput]
# Tokenize takes text or a conversation, not ids.
TokenizeInput = Union[str, Iterable[ChatMessageLike], pb.ChatInput]


class SamplingOptions(TypedDict, total=False):
    """The SamplingParameters fields as keyword arguments; an option not given keeps the server's
    default (generate.proto names each default)."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    frequency_penalty: float
    presence_penalty: float
    penalty_window: int
    logit_bias: Mapping[int, float]
    seed: int
    stop: Union[str, Sequence[str]]
    stop_token_ids: Sequence[int]
    ignore_eos: bool
    min_tokens: int
    max_tokens: int
    return_logprobs: bool
    top_logprobs: int
    # "raw" or "processed" (or the LogprobsMode value).
    logprobs_mode: Union[str, int]
    include_stop_str_in_output: bool
    skip_special_tokens: bool
    # Structured outputs (docs/structured.md): exactly one of {"json_schema": schema (a mapping,
    # sent as JSON, or its JSON text)}, {"json_object": True}, {"regex": str}, {"grammar": str},
    # {"choice": [str, ...]}; or an astr.v1 Constraint.
    constraint: Union[Mapping[str, Any], Any]
    # Each generated token's sampling mask (Completion.sampling_masks; see sampling_mask_ids).
    return_sampling_mask: bool


class ChatOptions(TypedDict, total=False):
    """ChatInput fields other than the messages; only with a chat prompt."""

    # Tool schemas: a list (sent as JSON) or a JSON array string.
    tools: Union[str, Sequence[Mapping[str, Any]]]
    continue_final_message: bool
    # Further template variables: a mapping (sent as JSON) or a JSON object string.
    template_kwargs: Union[str, Mapping[str, Any]]


class GenerateOptions(SamplingOptions, ChatOptions, total=False):
    """Keyword arguments of generate / generate_stream: SamplingOptions, ChatOptions and the
    GenerateRequest fields below."""

    request_id: str
    n: int
    priority: int
    return_prompt_ids: bool
    add_special_tokens: bool
    parse_special_tokens: bool
    # "recompute" (the default) or "reuse" (or the KvOnWeightUpdate value).
    kv_on_weight_update: Union[str, int]
    logprob_start: int
    # Prefix cache isolation: only requests with the same salt share cached K/V.
    cache_salt: str


_LOGPROBS_MODES = {"raw": pb.LOGPROBS_MODE_RAW, "processed": pb.LOGPROBS_MODE_PROCESSED}
_KV_ON_WEIGHT_UPDATE = {
    "recompute": pb.KV_ON_WEIGHT_UPDATE_RECOMPUTE,
    "reuse": pb.KV_ON_WEIGHT_UPDATE_REUSE,
}
_CHAT_OPTIONS = frozenset(ChatOptions.__annotations__)
_MESSAGE_KEYS = frozenset(pb.ChatMessage.DESCRIPTOR.fields_by_name) | {"tool_calls"}


def enum_value(field: str, value: Union[str, int], names: Mapping[str, int]) -> int:
    """`value` as a proto enum number: one of `names` (any case) or one of their numbers."""
    if isinstance(value, str):
        number = names.get(value.lower())
        if number is not None:
            return number
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if int(value) in names.values():
            return int(value)
    raise ValueError(f"{field}={value!r}: expected one of {', '.join(sorted(names))}")


def _set_field(message: Any, field: str, value: Any) -> None:
    """Sets one field, naming it in the error when protobuf refuses the value."""
    try:
        descriptor = message.DESCRIPTOR.fields_by_name[field]
        target = getattr(message, field)
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            target.clear()
            target.update({int(k): float(v) for k, v in value.items()})
        elif descriptor.label == descriptor.LABEL_REPEATED:
            del target[:]
            target.extend(value)
        else:
            setattr(message, field, value)
    except (TypeError, ValueError, AttributeError) as e:
        raise type(e)(f"{field}={value!r}: {e}") from e


def sampling_parameters(options: Mapping[str, Any]) -> pb.SamplingParameters:
    """The SamplingParameters of `options`; unknown names raise TypeError."""
    sampling = pb.SamplingParameters()
    fields = pb.SamplingParameters.DESCRIPTOR.fields_by_name
    for key, value in options.items():
        if key not in fields:
            raise TypeError(f"unknown sampling option {key!r}")
        if key == "logprobs_mode":
            value = enum_value(key, value, _LOGPROBS_MODES)
        elif key == "stop" and isinstance(value, str):
            value = [value]
        elif key == "constraint":
            sampling.constraint.CopyFrom(constraint(value))
            continue
        _set_field(sampling, key, value)
    return sampling


_CONSTRAINT_KINDS = ("json_schema", "json_object", "regex", "grammar", "choice")


def constraint(value: Any) -> pb.Constraint:
    """A Constraint from a Constraint or a mapping with exactly one of its kinds."""
    if isinstance(value, pb.Constraint):
        return value
    if not isinstance(value, Mapping) or len(value) != 1 or next(iter(value)) not in _CONSTRAINT_KINDS:
        raise ValueError(f"constraint={value!r}: expected a mapping with exactly one of "
                         f"{', '.join(_CONSTRAINT_KINDS)}")
    (kind, v), = value.items()
    out = pb.Constraint()
    if kind == "json_schema":
        out.json_schema = _json_text("constraint.json_schema", v)
    elif kind == "json_object":
        if v is not True:
            raise ValueError("constraint.json_object: must be True")
        out.json_object = True
    elif kind == "choice":
        if isinstance(v, str):
            raise TypeError("constraint.choice: a list of strings, not a string")
        out.choice.choices.extend(v)
    else:
        if not isinstance(v, str):
            raise TypeError(f"constraint.{kind}: must be a string")
        setattr(out, kind, v)
    return out


def _json_text(field: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except TypeError as e:
        raise TypeError(f"{field}: not JSON-serializable: {e}") from e


def chat_message(message: ChatMessageLike) -> pb.ChatMessage:
    """A ChatMessage from a ChatMessage or a mapping of its fields."""
    if isinstance(message, pb.ChatMessage):
        return message
    if not isinstance(message, Mapping):
        raise TypeError(f"chat message {message!r}: expected a mapping or astr.v1 ChatMessage")
    unknown = set(message) - _MESSAGE_KEYS
    if unknown:
        raise ValueError(f"chat message has unknown keys {sorted(unknown)}")
    out = pb.ChatMessage()
    for key, value in message.items():
        if key == "tool_calls":
            key, value = "tool_calls_json", _json_text("tool_calls", value)
        if not isinstance(value, str):
            raise TypeError(f"chat message {key}={value!r}: expected a string")
        setattr(out, key, value)
    return out


def chat_input(messages: Iterable[ChatMessageLike], **options: Unpack[ChatOptions]) -> pb.ChatInput:
    """A ChatInput from messages (oldest first) and the ChatOptions."""
    chat = pb.ChatInput(messages=[chat_message(m) for m in messages])
    for key, value in options.items():
        if key == "tools":
            chat.tools_json = _json_text(key, value)
        elif key == "template_kwargs":
            chat.template_kwargs_json = _json_text(key, value)
        elif key == "continue_final_message":
            chat.continue_final_message = bool(value)
        else:
            raise TypeError(f"unknown chat option {key!r}")
    return chat


def _classify(prompt: Any) -> Union[str, pb.TokenIds, pb.ChatInput, List[Any]]:
    """Text, TokenIds or ChatInput as given; any other iterable as a non-empty list."""
    if isinstance(prompt, (str, pb.TokenIds, pb.ChatInput)):
        return prompt
    if isinstance(prompt, (bytes, bytearray, Mapping)) or not isinstance(prompt, Iterable):
        raise TypeError(
            f"prompt of type {type(prompt).__name__}: expected str, token ids or chat messages"
        )
    items = list(prompt)
    if not items:
        raise ValueError("prompt is empty")
    return items


def _is_token_id(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _token_ids(items: List[Any]) -> Optional[pb.TokenIds]:
    if all(_is_token_id(x) for x in items):
        return pb.TokenIds(ids=[int(x) for x in items])
    return None


def generate_request(prompt: Prompt, **options: Unpack[GenerateOptions]) -> pb.GenerateRequest:
    """The GenerateRequest of a prompt and keyword options (see GenerateOptions).

    `prompt` is text, token ids, chat messages, or a TokenIds / ChatInput message. Raises TypeError
    for an unknown option or a prompt of another type and ValueError for a value the proto cannot
    hold, naming the option.
    """
    request = pb.GenerateRequest()
    sampling: Dict[str, Any] = {}
    chat: Dict[str, Any] = {}
    request_fields = pb.GenerateRequest.DESCRIPTOR.fields_by_name
    given: Dict[str, Any] = dict(options)
    for key, value in given.items():
        if key in _CHAT_OPTIONS:
            chat[key] = value
        elif key in pb.SamplingParameters.DESCRIPTOR.fields_by_name:
            sampling[key] = value
        elif key in request_fields and key not in ("text", "token_ids", "chat", "sampling"):
            if key == "kv_on_weight_update":
                value = enum_value(key, value, _KV_ON_WEIGHT_UPDATE)
            _set_field(request, key, value)
        else:
            raise TypeError(f"unknown generate option {key!r}")
    if sampling:
        request.sampling.CopyFrom(sampling_parameters(sampling))
    _set_prompt(request, prompt, chat)
    return request


def _set_prompt(request: Any, prompt: Any, chat: Dict[str, Any], ids_allowed: bool = True) -> None:
    """Sets the `input` oneof of a GenerateRequest or TokenizeRequest."""
    value = _classify(prompt)
    if isinstance(value, list):
        ids = _token_ids(value)
        if ids is None:
            request.chat.CopyFrom(chat_input(value, **chat))
            return
        value = ids
    if chat:
        kind = "a ChatInput: set them on the message" if isinstance(value, pb.ChatInput) else (
            "a prompt that is not chat messages")
        raise TypeError(f"{sorted(chat)} given with {kind}")
    if isinstance(value, str):
        request.text = value
    elif isinstance(value, pb.ChatInput):
        request.chat.CopyFrom(value)
    elif ids_allowed:
        request.token_ids.CopyFrom(value)
    else:
        raise TypeError("tokenize takes text or chat messages, not token ids")


def tokenize_request(
    input: TokenizeInput,
    *,
    add_special_tokens: Optional[bool] = None,
    parse_special_tokens: Optional[bool] = None,
    **chat: Unpack[ChatOptions],
) -> pb.TokenizeRequest:
    """The TokenizeRequest of text or chat messages (`chat` options apply to messages only)."""
    request = pb.TokenizeRequest()
    _set_prompt(request, input, dict(chat), ids_allowed=False)
    if add_special_tokens is not None:
        request.add_special_tokens = add_special_tokens
    if parse_special_tokens is not None:
        request.parse_special_tokens = parse_special_tokens
    return request
