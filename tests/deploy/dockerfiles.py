"""The Dockerfiles of deploy/docker/ read as stages of instructions (dockerfile-parse), for the
lint / contract test (test_dockerfiles.py) and the image test (test_container_image.py)."""

import json
import os
import shlex
from dataclasses import dataclass, field

from dockerfile_parse import DockerfileParser

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("ASTR_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
DOCKER_DIR = os.path.join(SOURCE_DIR, "deploy", "docker")
DOCKERFILES = {
    "cpu": os.path.join(DOCKER_DIR, "Dockerfile.cpu"),
    "cuda": os.path.join(DOCKER_DIR, "Dockerfile.cuda"),
}
ENTRYPOINT_SCRIPT = os.path.join(DOCKER_DIR, "entrypoint.sh")


@dataclass
class Instruction:
    name: str  # upper case: RUN, COPY, ...
    value: str  # continuation lines joined
    line: int  # 1-based, where it starts


@dataclass
class Stage:
    name: str  # the AS name ("" when unnamed)
    base: str  # the FROM image, ARGs not substituted
    line: int
    instructions: list = field(default_factory=list)

    def all(self, name):
        return [i for i in self.instructions if i.name == name]


def global_args(path):
    """ARG defaults declared before the first FROM, {name: default}."""
    out = {}
    for item in _structure(path):
        if item["instruction"] == "FROM":
            break
        if item["instruction"] == "ARG":
            name, _, default = item["value"].partition("=")
            out[name.strip()] = default.strip().strip('"')
    return out


def stages(path):
    """The build stages of a Dockerfile, in order."""
    out = []
    for item in _structure(path):
        name = item["instruction"]
        if name == "COMMENT":
            continue
        if name == "FROM":
            words = item["value"].split()
            words = [w for w in words if not w.startswith("--platform")]
            stage_name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else ""
            out.append(Stage(stage_name, words[0], item["startline"] + 1))
        elif out:
            out[-1].instructions.append(Instruction(name, item["value"], item["startline"] + 1))
    return out


def stage(path, name):
    for s in stages(path):
        if s.name == name:
            return s
    raise AssertionError(f"{path}: no stage named {name!r}")


def copy_parts(value):
    """A COPY's (flags, sources, destination): flags like {"from": "build"}; sources as written."""
    words = shlex.split(value) if not value.lstrip().startswith("[") else json.loads(value)
    flags = {}
    while words and words[0].startswith("--"):
        key, _, val = words.pop(0)[2:].partition("=")
        flags[key] = val
    return flags, words[:-1], words[-1]


def apt_packages(run_value):
    """The packages every `apt-get install` in a RUN value names (options left out)."""
    packages = []
    for command in run_value.replace(";", "&&").split("&&"):
        words = shlex.split(command)
        if "apt-get" in words and "install" in words:
            after = words[words.index("install") + 1:]
            packages += [w for w in after if not w.startswith("-")]
    return packages


def exec_form(value):
    """An ENTRYPOINT / CMD in exec (JSON) form as a list, or None for the shell form."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, list) else None


def binaries(path):
    """What the `binaries` stage holds, as paths relative to its root (bin/astr-worker, ...): the
    files a prebuilt folder given with `--build-context binaries=DIR` must have."""
    out = []
    for copy in stage(path, "binaries").all("COPY"):
        _, sources, dest = copy_parts(copy.value)
        out += [os.path.join(dest, os.path.basename(s)).lstrip("/") for s in sources]
    return out


def _structure(path):
    with open(path, "rb") as f:
        return DockerfileParser(fileobj=f).structure
