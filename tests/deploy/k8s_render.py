"""Renders the Kubernetes manifests of deploy/k8s with `kubectl kustomize` and walks the result:
the part the deploy tests share. It knows how Kubernetes objects are shaped, not what ours should
hold; the expectations are in the tests.

`ASTR_KUBECTL` picks the kubectl (e.g. Debian's 1.20 at another path), else the one on PATH.
"""

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S_DIR = REPO / "deploy" / "k8s"

# Every kustomization under deploy/k8s, by the name the tests use for it.
KUSTOMIZATIONS = {
    "base": "base",
    "cpu": "overlays/cpu",
    "gpu": "overlays/gpu",
    "monitoring": "extras/monitoring",
    "autoscaling": "extras/autoscaling",
    "model-from-image": "extras/model-from-image",
}
# Those that render a whole installation (scheduler and workers).
INSTALLS = ("base", "cpu", "gpu", "model-from-image")
# Those an operator applies as they are: an image and resources set.
SERVING = ("cpu", "gpu", "model-from-image")

KUBECTL = os.environ.get("ASTR_KUBECTL") or shutil.which("kubectl")
NO_KUBECTL = "kubectl is not installed (scripts/setup.sh installs Debian's kubernetes-client)"

ASTR_BINARIES = ("astr-scheduler", "astr-worker", "astr")
# The flags with which a binary binds a port, HOST:PORT.
LISTEN_FLAGS = ("listen", "http-listen", "admin-listen", "metrics-listen")
POD_TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def kustomization_dir(name):
    return K8S_DIR / KUSTOMIZATIONS[name]


@functools.lru_cache(maxsize=None)
def render(name):
    """The documents `kubectl kustomize` renders for kustomization `name`, in its order."""
    path = kustomization_dir(name)
    r = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"{KUBECTL} kustomize {path} exited {r.returncode}:\n{r.stderr}")
    return tuple(d for d in yaml.safe_load_all(r.stdout) if d is not None)


def ident(doc):
    """"Kind/name" of a document, for messages."""
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def find(docs, kind, name=None):
    """The documents of `kind` (and `name`, when given)."""
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d["metadata"].get("name") == name)]


def one(docs, kind, name):
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


class PodTemplate:
    """The pod template of a workload object."""

    def __init__(self, owner):
        self.owner = owner
        template = owner["spec"]["template"]
        self.metadata = template.get("metadata") or {}
        self.labels = self.metadata.get("labels") or {}
        self.annotations = self.metadata.get("annotations") or {}
        self.spec = template["spec"]

    @property
    def name(self):
        return ident(self.owner)

    def __eq__(self, other):  # the same workload, whichever rendering it came from
        return isinstance(other, PodTemplate) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"PodTemplate({self.name})"

    def _key(self):
        m = self.owner["metadata"]
        return (self.owner["kind"], m.get("namespace"), m["name"])

    def containers(self, init=True):
        """Main containers, then init containers (when `init`)."""
        out = list(self.spec.get("containers") or [])
        if init:
            out += self.spec.get("initContainers") or []
        return out

    def volume(self, name):
        for v in self.spec.get("volumes") or []:
            if v["name"] == name:
                return v
        raise AssertionError(f"{self.name}: no volume {name!r}")


def pod_templates(docs):
    return [PodTemplate(d) for d in docs if d.get("kind") in POD_TEMPLATE_KINDS]


def binary(container):
    """Which astr binary the container runs (by its command), or None."""
    command = container.get("command") or []
    name = os.path.basename(command[0]) if command else ""
    return name if name in ASTR_BINARIES else None


_ARG_RE = re.compile(r"^--([a-z0-9][a-z0-9-]*)(?:=(.*))?$", re.S)


def parse_args(container):
    """{flag: value} of the container's args, each `--flag=value` or a bare `--flag` (value
    None). Any other form, or a flag given twice, fails: the tests read flags this way."""
    flags = {}
    for arg in container.get("args") or []:
        m = _ARG_RE.match(str(arg))
        assert m, f"container {container['name']}: arg {arg!r} is not --flag=value"
        assert m.group(1) not in flags, f"container {container['name']}: --{m.group(1)} twice"
        flags[m.group(1)] = m.group(2)
    return flags


def host_port(address):
    """("HOST", PORT) of HOST:PORT, [V6]:PORT included."""
    host, sep, port = address.rpartition(":")
    assert sep and port.isdigit(), f"{address!r} is not HOST:PORT"
    return host.strip("[]"), int(port)


def is_loopback(host):
    return host in ("localhost", "::1") or host.startswith("127.")


def listen_ports(container):
    """{port: (flag, host)} of the listen-style flags the container's args set."""
    out = {}
    for flag, value in parse_args(container).items():
        if flag in LISTEN_FLAGS and value:
            host, port = host_port(value)
            out[port] = (flag, host)
    return out


def container_ports(container):
    """{port name or number: number} of the declared container ports (each under both keys)."""
    out = {}
    for p in container.get("ports") or []:
        out[p["containerPort"]] = p["containerPort"]
        if "name" in p:
            out[p["name"]] = p["containerPort"]
    return out


def probes(container):
    """[(kind, probe)] of the container's startup, readiness and liveness probes."""
    return [(k, container[k]) for k in ("startupProbe", "readinessProbe", "livenessProbe")
            if k in container]


def probe_port(probe):
    """The port a probe connects to (a number or a port name), whatever its handler."""
    for handler in ("grpc", "httpGet", "tcpSocket"):
        if handler in probe:
            return probe[handler]["port"]
    return None


def selector_matches(selector, labels):
    """Whether a label selector (a Service's plain map, or matchLabels / matchExpressions)
    selects `labels`. An empty selector selects everything, as in Kubernetes."""
    if selector is None:
        return True
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selected(docs, selector):
    """The pod templates a selector selects."""
    return [t for t in pod_templates(docs) if selector_matches(selector, t.labels)]


def mount_for(container, path):
    """The volume mount that holds absolute `path` in the container (the deepest), or None."""
    best = None
    for m in container.get("volumeMounts") or []:
        mount = m["mountPath"].rstrip("/") or "/"
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            if best is None or len(mount) > len(best["mountPath"]):
                best = m
    return best
