"""Validation of JSON values against the schemas of OpenAI's own API description
(/work/shared/openai/openapi.yaml, `components/schemas/<name>`).

    import openai_schemas
    openai_schemas.validate(body, "CreateChatCompletionResponse")  # raises SchemaError

The document is OpenAPI 3.1, whose schemas are JSON Schema 2020-12 plus a few OpenAPI-isms that a
JSON Schema validator would silently ignore; they are rewritten once at load time so that they
constrain what the vendor meant:
- `nullable: true` (an OpenAPI 3.0 keyword the document still uses ~110 times, e.g. a stream
  chunk's `finish_reason`) becomes "this schema, or null";
- `discriminator`, `example`, `x-*` keys are annotations and are dropped;
- `#/components/schemas/...` references resolve inside the document (a `referencing` registry
  holding the whole document as one resource).

One schema is derived here, because the document describes completions streaming only in words
("both the streamed and non-streamed response objects share the same shape"), while the chunks
OpenAI actually streams carry `finish_reason: null` until the last one: `CreateCompletionStreamResponse`
is `CreateCompletionResponse` with a nullable `choices[].finish_reason` and `usage`.

Parsing the 3 MB YAML takes ~1.5 s, so the rewritten document is kept in a module global and
pickled beside the build (or in the temp dir), keyed by the file's path, size and mtime.
"""

import copy
import hashlib
import os
import pickle
import tempfile

import jsonschema
import referencing
import referencing.jsonschema

SHARED_DIR = os.environ.get("ASTR_SHARED_DIR") or "/work/shared"
SPEC_PATH = os.path.join(SHARED_DIR, "openai", "openapi.yaml")
BASE_URI = "urn:astr-tests:openai-openapi"

# Keywords whose value is one subschema, a list of subschemas, or a map name -> subschema.
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ANNOTATIONS = ("discriminator", "example", "externalDocs", "xml")

_document = None
_validators = {}


class SchemaError(AssertionError):
    """A value that does not match its schema; the message lists every violation with its path."""


def _normalize(schema):
    """A copy of `schema` (a JSON Schema object of the document) with the OpenAPI-isms rewritten."""
    if isinstance(schema, bool) or not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key.startswith("x-") or key in _ANNOTATIONS or key == "nullable":
            continue
        if key in _ONE:
            out[key] = [_normalize(v) for v in value] if isinstance(value, list) else _normalize(value)
        elif key in _LIST:
            out[key] = [_normalize(v) for v in value]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {name: _normalize(v) for name, v in value.items()}
        else:
            out[key] = value
    if schema.get("nullable") is True:
        # "This schema, or null". Wrapping rather than editing `type` also covers `$ref` and
        # `enum` siblings (an enum without null in it would still refuse null).
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def _normalize_document(doc):
    doc = dict(doc)
    components = dict(doc.get("components", {}))
    components["schemas"] = {name: _normalize(s) for name, s in components["schemas"].items()}
    doc["components"] = components
    # Only the schemas are validated against; drop the rest (paths alone are most of the file).
    return {"openapi": doc.get("openapi"), "components": {"schemas": components["schemas"]}}


def _cache_path(spec_path):
    st = os.stat(spec_path)
    key = f"{os.path.realpath(spec_path)}:{st.st_size}:{st.st_mtime_ns}:v1".encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    bin_dir = os.environ.get("ASTR_BIN_DIR")
    dirs = [os.path.join(os.path.dirname(bin_dir), ".cache")] if bin_dir else []
    dirs.append(tempfile.gettempdir())
    for d in dirs:
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return os.path.join(d, f"openai-openapi-{digest}.pickle")
    return None


def document(spec_path=SPEC_PATH):
    """The spec's schemas (normalized), parsed once per process and cached on disk."""
    global _document
    if _document is not None and spec_path == SPEC_PATH:
        return _document
    cache = _cache_path(spec_path)
    doc = None
    if cache and os.path.exists(cache):
        try:
            with open(cache, "rb") as f:
                doc = pickle.load(f)
        except (OSError, pickle.UnpicklingError, EOFError):
            doc = None
    if doc is None:
        import yaml

        with open(spec_path, "rb") as f:
            doc = _normalize_document(yaml.load(f, Loader=yaml.CSafeLoader))
        if cache:
            # Atomic: test files running at once may write the same cache.
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache), suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(doc, f, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, cache)
            except OSError:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    if "CreateCompletionResponse" in doc["components"]["schemas"]:
        _derive(doc["components"]["schemas"])
    if spec_path == SPEC_PATH:
        _document = doc
    return doc


def _derive(schemas):
    """Adds the derived schemas (see the module comment) to the normalized `schemas`, in place."""
    chunk = copy.deepcopy(schemas["CreateCompletionResponse"])
    props = chunk["properties"]
    choice = props["choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    props["usage"] = {"anyOf": [props["usage"], {"type": "null"}]}
    schemas["CreateCompletionStreamResponse"] = chunk


def schema_names():
    return set(document()["components"]["schemas"])


def validator(name):
    """A Draft 2020-12 validator of `components/schemas/<name>`, references resolved in the spec."""
    v = _validators.get(name)
    if v is None:
        doc = document()
        if name not in doc["components"]["schemas"]:
            raise KeyError(f"no schema {name!r} in {SPEC_PATH}")
        resource = referencing.jsonschema.DRAFT202012.create_resource(doc)
        registry = referencing.Registry().with_resource(BASE_URI, resource)
        schema = {"$ref": f"{BASE_URI}#/components/schemas/{name}"}
        v = jsonschema.Draft202012Validator(schema, registry=registry)
        _validators[name] = v
    return v


def errors(instance, name):
    """Every violation of `name` by `instance`, as 'path: message' lines (empty when valid)."""
    found = []
    for e in sorted(validator(name).iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        path = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in e.absolute_path)
        found.append(f"{path or '<root>'}: {e.message}")
        # anyOf/oneOf failures say little on their own; the best sub-error says why.
        best = jsonschema.exceptions.best_match(e.context) if e.context else None
        if best is not None:
            sub = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in best.absolute_path)
            found.append(f"    (closest branch) {sub or '<root>'}: {best.message}")
    return found


def validate(instance, name):
    """Raises SchemaError naming every violation when `instance` does not match `name`."""
    found = errors(instance, name)
    if found:
        shown = repr(instance)
        if len(shown) > 2000:
            shown = shown[:2000] + "..."
        raise SchemaError(f"not a valid {name}:\n  " + "\n  ".join(found) + f"\nvalue: {shown}")
