"""The Kubernetes manifests of deploy/k8s: every kustomization renders with `kubectl kustomize`,
every document is valid for the Kubernetes API (kubernetes-validate's schemas, strict: unknown
fields fail), and the rendered objects keep the rules docs/deploy.md#kubernetes states: security
context, drain time within the grace period, gRPC probes on declared ports, the network policy,
the model volume, the admin token, the GPU overlay's device, the autoscaler's metrics.

Skips (with that reason) only where no kubectl is installed. The flags themselves are checked
against the binaries by test_k8s_flags.py."""

import re
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_render as k8s  # noqa: E402
from k8s_render import KUSTOMIZATIONS, INSTALLS, SERVING  # noqa: E402

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate missing: run scripts/setup.sh")

pytestmark = pytest.mark.skipif(k8s.KUBECTL is None, reason=k8s.NO_KUBECTL)

# Kubernetes versions the manifests are validated for: 1.27, the first with gRPC probes GA (the
# oldest the manifests can run on), and a recent one.
K8S_VERSIONS = ("1.27", "1.33")

# Kinds no Kubernetes schema covers, each with the reason it is not validated here. Anything else
# without a schema fails.
UNVALIDATED_KINDS = {
    ("monitoring.coreos.com/v1", "PodMonitor"):
        "a Prometheus Operator CRD, not part of the Kubernetes API; checked by "
        "test_pod_monitors_scrape_declared_metrics_ports instead",
}

SECURITY_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
}


def rendered(name):
    return k8s.render(name)


def astr_pods(name):
    """{binary: PodTemplate} of a kustomization's scheduler and worker."""
    out = {}
    for t in k8s.pod_templates(rendered(name)):
        for c in t.containers(init=False):
            b = k8s.binary(c)
            if b:
                assert b not in out, f"{name}: two pod templates run {b}"
                out[b] = t
    return out


def astr_container(template):
    [c] = [c for c in template.containers(init=False) if k8s.binary(c)]
    return c


def scheduler_and_worker(name):
    pods = astr_pods(name)
    assert set(pods) == {"astr-scheduler", "astr-worker"}, f"{name}: runs {sorted(pods)}"
    return pods["astr-scheduler"], pods["astr-worker"]


# ---------------------------------------------------------------------------------------------
# Rendering and schemas


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_renders(name):
    docs = rendered(name)
    assert docs, f"{name} renders nothing"
    for d in docs:
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), d


def _validate_all(name, version):
    """Validates every document; returns the (kind, reason) of the documents left out."""
    left_out = []
    for doc in rendered(name):
        key = (doc["apiVersion"], doc["kind"])
        if key in UNVALIDATED_KINDS:
            left_out.append((k8s.ident(doc), UNVALIDATED_KINDS[key]))
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {k8s.ident(doc)} invalid for Kubernetes {version} at "
                        f"{'/'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            pytest.fail(f"{name}: {k8s.ident(doc)}: {e.message} (add it to UNVALIDATED_KINDS "
                        f"with a reason if it is a CRD)")
    return left_out


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_documents_match_kubernetes_schemas(name, version, record_property):
    left_out = _validate_all(name, version)
    for what, reason in left_out:
        record_property(f"not validated: {what}", reason)
    if name == "monitoring":
        # The extras that are all CRDs: say so in the report instead of passing silently.
        assert left_out and len(left_out) == len(rendered(name))
        pytest.skip("; ".join(f"{w}: {r}" for w, r in left_out))


def test_unvalidated_kinds_really_have_no_schema():
    """Each entry of UNVALIDATED_KINDS is a kind kubernetes-validate has no schema for (an entry
    for a kind that has one would hide real errors)."""
    for (api_version, kind) in UNVALIDATED_KINDS:
        doc = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_schema_validation_catches_errors():
    """The validation above is not vacuous: a misspelt field and a wrong type both fail."""
    sts = k8s.one(rendered("cpu"), "StatefulSet", "astr-worker")
    kubernetes_validate.validate(sts, K8S_VERSIONS[-1], strict=True)
    misspelt = yaml.safe_load(yaml.safe_dump(sts))
    misspelt["spec"]["template"]["spec"]["terminationGracePeriod"] = 10
    wrong_type = yaml.safe_load(yaml.safe_dump(sts))
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    for bad in (misspelt, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def test_adapter_rules_configmap_is_valid():
    path = k8s.K8S_DIR / "extras" / "autoscaling" / "prometheus-adapter-rules.yaml"
    [doc] = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


# ---------------------------------------------------------------------------------------------
# Namespace, labels, images


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_objects_are_labelled_and_in_namespace_astr(name):
    for d in rendered(name):
        labels = d["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/part-of") == "astr", k8s.ident(d)
        if d["kind"] == "Namespace":
            assert d["metadata"]["name"] == "astr"
        else:
            assert d["metadata"].get("namespace") == "astr", k8s.ident(d)
    for t in k8s.pod_templates(rendered(name)):
        component = t.labels.get("app.kubernetes.io/component")
        assert component in ("scheduler", "worker"), t.name
        assert t.labels.get("app.kubernetes.io/name") == f"astr-{component}", t.name
        assert t.labels.get("app.kubernetes.io/part-of") == "astr", t.name
        assert k8s.selector_matches(t.owner["spec"]["selector"], t.labels), t.name


@pytest.mark.parametrize("name,image", [("cpu", "astr-cpu"), ("gpu", "astr-cuda"),
                                        ("model-from-image", "astr-cpu")])
def test_overlay_sets_the_image(name, image):
    pods = astr_pods(name)
    assert set(pods) == {"astr-scheduler", "astr-worker"}
    for t in pods.values():
        assert astr_container(t)["image"].split(":")[0] == image, t.name


# ---------------------------------------------------------------------------------------------
# Containers: security context, resources, /tmp


@pytest.mark.parametrize("name", INSTALLS)
def test_every_container_is_locked_down(name):
    templates = k8s.pod_templates(rendered(name))
    assert templates
    for t in templates:
        pod_sc = t.spec.get("securityContext") or {}
        for c in t.containers():
            where = f"{name}: {t.name} container {c['name']}"
            sc = c.get("securityContext") or {}
            for field, want in SECURITY_CONTEXT.items():
                assert sc.get(field) == want, f"{where}: securityContext.{field} {sc.get(field)!r}"
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert "add" not in sc.get("capabilities", {}), where
            seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
            assert seccomp.get("type") == "RuntimeDefault", where
            assert not sc.get("privileged"), where


@pytest.mark.parametrize("name", INSTALLS)
def test_tmp_is_a_writable_emptydir(name):
    """The root file system is read-only, so /tmp is an emptyDir in every main container."""
    for t in astr_pods(name).values():
        c = astr_container(t)
        m = k8s.mount_for(c, "/tmp")
        assert m and m["mountPath"] == "/tmp" and not m.get("readOnly"), t.name
        assert "emptyDir" in t.volume(m["name"]), t.name


@pytest.mark.parametrize("name", SERVING)
def test_every_container_has_requests_and_limits(name):
    for t in k8s.pod_templates(rendered(name)):
        for c in t.containers():
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    assert r in (res.get(part) or {}), f"{name}: {t.name}/{c['name']} {part}.{r}"


def test_gpu_overlay_gives_each_worker_a_gpu():
    _, worker = scheduler_and_worker("gpu")
    c = astr_container(worker)
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert k8s.parse_args(c).get("backend") == "cuda"
    tolerations = worker.spec.get("tolerations") or []
    assert any(t.get("key") == "nvidia.com/gpu" and t.get("effect") in (None, "NoSchedule")
               for t in tolerations), tolerations


def test_cpu_overlay_asks_for_no_gpu():
    scheduler, worker = scheduler_and_worker("cpu")
    assert k8s.parse_args(astr_container(worker)).get("backend") == "cpu"
    for t in (scheduler, worker):
        for c in t.containers():
            for part in ("requests", "limits"):
                assert "nvidia.com/gpu" not in (c.get("resources") or {}).get(part, {}), t.name


# ---------------------------------------------------------------------------------------------
# Drain, probes


@pytest.mark.parametrize("name", INSTALLS)
def test_termination_grace_exceeds_drain_timeout(name):
    """SIGTERM starts a drain of at most --drain-timeout-s; the kubelet's SIGKILL comes after
    terminationGracePeriodSeconds, which must leave the drain its whole time."""
    for binary, t in astr_pods(name).items():
        drain = k8s.parse_args(astr_container(t)).get("drain-timeout-s")
        assert drain is not None, f"{name}: {binary} sets no --drain-timeout-s"
        grace = t.spec.get("terminationGracePeriodSeconds", 30)
        assert grace > int(drain), f"{name}: {binary}: grace {grace} s <= drain {drain} s"


@pytest.mark.parametrize("name", INSTALLS)
def test_scheduler_waits_for_a_leaving_worker_as_long_as_it_drains(name):
    """A worker that leaves is drained from both ends: the scheduler keeps its sequences there
    for --worker-drain-timeout-s, the worker lets them run for its --drain-timeout-s. Equal, so
    the drain lasts what the worker's flag says."""
    scheduler, worker = scheduler_and_worker(name)
    waits = k8s.parse_args(astr_container(scheduler)).get("worker-drain-timeout-s")
    drains = k8s.parse_args(astr_container(worker)).get("drain-timeout-s")
    assert waits is not None and waits == drains, (waits, drains)


@pytest.mark.parametrize("name", INSTALLS)
def test_probes_are_grpc_health_checks_on_declared_ports(name):
    for binary, t in astr_pods(name).items():
        c = astr_container(t)
        ports = k8s.container_ports(c)
        found = dict(k8s.probes(c))
        assert set(found) == {"startupProbe", "readinessProbe", "livenessProbe"}, \
            f"{name}: {binary} probes {sorted(found)}"
        for kind, probe in found.items():
            assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, \
                f"{name}: {binary} {kind} is not a gRPC probe"
            assert probe["grpc"]["port"] in ports, f"{name}: {binary} {kind} port not declared"
        # "" is the server's overall status, which follows admission (not ready while draining);
        # "liveness" stays SERVING while the process runs, whatever its queue.
        assert found["readinessProbe"]["grpc"].get("service", "") == ""
        assert found["livenessProbe"]["grpc"].get("service") == "liveness"
        assert found["startupProbe"]["grpc"].get("service") == "liveness"


def test_worker_startup_probe_waits_for_the_model():
    """Loading a model takes minutes: the startup probe allows at least ten."""
    for name in INSTALLS:
        _, worker = scheduler_and_worker(name)
        p = astr_container(worker)["startupProbe"]
        allowed_s = p.get("periodSeconds", 10) * p.get("failureThreshold", 3)
        assert allowed_s >= 600, f"{name}: the worker gets {allowed_s} s to start"


# ---------------------------------------------------------------------------------------------
# Scheduler and workers: replicas, services, disruption budgets


@pytest.mark.parametrize("name", INSTALLS)
def test_one_scheduler_replaced_not_rolled(name):
    """The scheduler owns KV placement and a worker serves one scheduler's stream at a time: one
    replica, and the old one gone before the new one starts."""
    scheduler, _ = scheduler_and_worker(name)
    assert scheduler.owner["kind"] == "Deployment"
    assert scheduler.owner["spec"].get("replicas", 1) == 1
    assert scheduler.owner["spec"]["strategy"]["type"] == "Recreate"


@pytest.mark.parametrize("name", INSTALLS)
def test_workers_are_a_parallel_statefulset_behind_a_headless_service(name):
    docs = rendered(name)
    _, worker = scheduler_and_worker(name)
    sts = worker.owner
    assert sts["kind"] == "StatefulSet"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    svc = k8s.one(docs, "Service", sts["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"].get("publishNotReadyAddresses", False) is False
    assert k8s.selected(docs, svc["spec"]["selector"]) == [worker]


@pytest.mark.parametrize("name", INSTALLS)
def test_scheduler_dials_the_workers_headless_service(name):
    """--workers is the DNS name of the Service in front of the worker pods, on its port."""
    docs = rendered(name)
    scheduler, worker = scheduler_and_worker(name)
    svc = k8s.one(docs, "Service", worker.owner["spec"]["serviceName"])
    [port] = svc["spec"]["ports"]
    want = (f"dns:///{svc['metadata']['name']}.{svc['metadata']['namespace']}"
            f".svc.cluster.local:{port['port']}")
    assert k8s.parse_args(astr_container(scheduler))["workers"] == want


@pytest.mark.parametrize("name", INSTALLS)
def test_scheduler_service_exposes_grpc_and_http_only(name):
    docs = rendered(name)
    scheduler, _ = scheduler_and_worker(name)
    [svc] = [s for s in find_services(docs) if k8s.selected(docs, s["spec"]["selector"]) ==
             [scheduler]]
    assert sorted(p["name"] for p in svc["spec"]["ports"]) == ["grpc", "http"]
    admin = k8s.parse_args(astr_container(scheduler))["admin-listen"]
    host, port = k8s.host_port(admin)
    assert k8s.is_loopback(host), f"{name}: the admin service listens on {admin}"
    assert port not in k8s.container_ports(astr_container(scheduler))


def find_services(docs):
    return k8s.find(docs, "Service")


@pytest.mark.parametrize("name", INSTALLS)
def test_disruption_budgets(name):
    docs = rendered(name)
    scheduler, worker = scheduler_and_worker(name)
    budgets = {}
    for pdb in k8s.find(docs, "PodDisruptionBudget"):
        [t] = k8s.selected(docs, pdb["spec"]["selector"])
        budgets[t.name] = pdb["spec"]
    # One worker down at a time; the lone scheduler only when you move it (docs/deploy.md).
    assert budgets[worker.name].get("maxUnavailable") == 1
    assert budgets[scheduler.name].get("minAvailable") == 1


# ---------------------------------------------------------------------------------------------
# Network policy


def _policies_for(docs, template):
    return [p for p in k8s.find(docs, "NetworkPolicy")
            if k8s.selector_matches(p["spec"]["podSelector"], template.labels)]


def _rule_ports(rule):
    return {p["port"] for p in rule.get("ports") or []}


@pytest.mark.parametrize("name", INSTALLS)
def test_network_policy_lets_only_the_scheduler_reach_the_workers(name):
    docs = rendered(name)
    scheduler, worker = scheduler_and_worker(name)
    ports = k8s.container_ports(astr_container(worker))
    grpc_port, metrics_port = ports["grpc"], ports["metrics"]
    policies = _policies_for(docs, worker)
    assert policies, f"{name}: no NetworkPolicy selects the workers"
    rules = []
    for p in policies:
        assert "Ingress" in p["spec"]["policyTypes"]
        rules += p["spec"].get("ingress") or []
    assert rules
    for rule in rules:
        # A rule without ports or without sources would open every port or admit everyone.
        assert rule.get("ports") and rule.get("from"), rule
        opened = {ports.get(p, p) for p in _rule_ports(rule)}
        assert opened <= {grpc_port, metrics_port}, opened
        if grpc_port in opened:
            assert opened == {grpc_port}, rule
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, f"step streams allowed from {peer}"
                assert k8s.selected(docs, peer["podSelector"]) == [scheduler], peer
        else:
            for peer in rule["from"]:
                assert "ipBlock" not in peer, peer
                labels = peer.get("podSelector", {}).get("matchLabels", {})
                labels.update(peer.get("namespaceSelector", {}).get("matchLabels", {}))
                assert labels.get("astr-metrics-scraper") == "true", peer
    assert any(grpc_port in {ports.get(p, p) for p in _rule_ports(r)} for r in rules)


@pytest.mark.parametrize("name", INSTALLS)
def test_network_policy_opens_the_scheduler_apis_in_cluster(name):
    docs = rendered(name)
    scheduler, _ = scheduler_and_worker(name)
    ports = k8s.container_ports(astr_container(scheduler))
    [policy] = _policies_for(docs, scheduler)
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {}}]
    assert {ports.get(p, p) for p in _rule_ports(rule)} == {ports["grpc"], ports["http"]}


# ---------------------------------------------------------------------------------------------
# Model volume, admin token


@pytest.mark.parametrize("name", ("base", "cpu", "gpu"))
def test_model_volume_is_a_read_only_claim_in_both_pods(name):
    docs = rendered(name)
    pvc = k8s.one(docs, "PersistentVolumeClaim", "astr-models")
    assert pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    for t in scheduler_and_worker(name):
        c = astr_container(t)
        m = k8s.mount_for(c, "/models/x")
        assert m and m["mountPath"] == "/models" and m.get("readOnly") is True, t.name
        claim = t.volume(m["name"])["persistentVolumeClaim"]
        assert claim == {"claimName": "astr-models", "readOnly": True}, t.name


def test_model_from_image_copies_into_an_emptydir():
    for t in scheduler_and_worker("model-from-image"):
        m = k8s.mount_for(astr_container(t), "/models/x")
        assert "emptyDir" in t.volume(m["name"]), t.name
        [init] = t.spec["initContainers"]
        assert any(im["name"] == m["name"] and not im.get("readOnly")
                   for im in init["volumeMounts"]), t.name
        assert not any("persistentVolumeClaim" in v for v in t.spec["volumes"]), t.name


@pytest.mark.parametrize("name", INSTALLS)
def test_worker_model_is_on_the_model_volume(name):
    _, worker = scheduler_and_worker(name)
    c = astr_container(worker)
    m = k8s.mount_for(c, k8s.parse_args(c)["model"])
    assert m and m["name"] == "models"


@pytest.mark.parametrize("name", INSTALLS)
def test_admin_token_comes_from_the_secret(name):
    docs = rendered(name)
    scheduler, _ = scheduler_and_worker(name)
    c = astr_container(scheduler)
    path = k8s.parse_args(c)["admin-token-file"]
    m = k8s.mount_for(c, path)
    assert m and m.get("readOnly") is True, path
    secret_name = scheduler.volume(m["name"])["secret"]["secretName"]
    secret = k8s.one(docs, "Secret", secret_name)
    key = path[len(m["mountPath"].rstrip("/")) + 1:]
    assert key in {**secret.get("data", {}), **secret.get("stringData", {})}, key


def test_shipped_admin_token_is_an_obvious_placeholder():
    secret = k8s.one(rendered("base"), "Secret", "astr-admin-token")
    assert "REPLACE-ME" in secret["stringData"]["token"]


# ---------------------------------------------------------------------------------------------
# Metrics: annotations, PodMonitors, autoscaling


@pytest.mark.parametrize("name", INSTALLS)
def test_pods_carry_prometheus_scrape_annotations(name):
    for binary, t in astr_pods(name).items():
        a = t.annotations
        assert a.get("prometheus.io/scrape") == "true", t.name
        assert a.get("prometheus.io/path") == "/metrics", t.name
        assert int(a["prometheus.io/port"]) in k8s.container_ports(astr_container(t)), t.name


def test_pod_monitors_scrape_declared_metrics_ports():
    """The PodMonitors (not validated by schema: a CRD) select our pods, name ports they declare,
    and scrape the path and port the pods' own annotations name."""
    install = rendered("cpu")
    monitors = k8s.find(rendered("monitoring"), "PodMonitor")
    covered = set()
    for pm in monitors:
        assert pm["metadata"]["namespace"] == "astr"
        pods = k8s.selected(install, pm["spec"]["selector"])
        assert pods, f"{k8s.ident(pm)} selects nothing"
        for t in pods:
            c = astr_container(t)
            for ep in pm["spec"]["podMetricsEndpoints"]:
                port = k8s.container_ports(c).get(ep["port"])
                assert port == int(t.annotations["prometheus.io/port"]), k8s.ident(pm)
                assert ep.get("path", "/metrics") == t.annotations["prometheus.io/path"]
            covered.add(k8s.binary(c))
    assert covered == {"astr-scheduler", "astr-worker"}


def _adapter_rules():
    path = k8s.K8S_DIR / "extras" / "autoscaling" / "prometheus-adapter-rules.yaml"
    [doc] = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return yaml.safe_load(doc["data"]["config.yaml"])["externalRules"]


def _documented_scheduler_metrics():
    """Gauge and counter names of docs/metrics.md's scheduler section."""
    text = (k8s.REPO / "docs" / "metrics.md").read_text()
    scheduler = text.split("## Scheduler", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(astr:[a-z_]+)`", scheduler, re.M))


def test_hpa_scales_the_worker_statefulset_on_adapter_metrics():
    [hpa] = k8s.find(rendered("autoscaling"), "HorizontalPodAutoscaler")
    _, worker = scheduler_and_worker("cpu")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == \
        (worker.owner["apiVersion"], worker.owner["kind"], worker.owner["metadata"]["name"])
    assert hpa["metadata"]["namespace"] == worker.owner["metadata"]["namespace"]

    rules = _adapter_rules()
    served = {r["name"]["as"] for r in rules}
    metrics = hpa["spec"]["metrics"]
    assert metrics
    for m in metrics:
        assert m["type"] == "External"
        # AverageValue: the cluster-wide value divided by the current worker replicas.
        assert m["external"]["target"]["type"] == "AverageValue"
        assert m["external"]["metric"]["name"] in served, m
    assert "astr_num_requests_waiting" in {m["external"]["metric"]["name"] for m in metrics}

    documented = _documented_scheduler_metrics()
    assert "astr:num_requests_waiting" in documented  # the parser found the table
    for r in rules:
        names = set(re.findall(r"astr:[a-z_]+", r["seriesQuery"] + " " + r["metricsQuery"]))
        assert names and names <= documented, f"{r['name']['as']}: {names - documented}"
        assert r["resources"]["overrides"]["namespace"] == {"resource": "namespace"}


def test_hpa_removes_one_worker_at_a_time_after_its_drain():
    """Scale-down takes one pod per period, and a period lasts at least a worker's grace
    period, so one drain is over before the next begins."""
    [hpa] = k8s.find(rendered("autoscaling"), "HorizontalPodAutoscaler")
    _, worker = scheduler_and_worker("cpu")
    grace = worker.spec["terminationGracePeriodSeconds"]
    policies = hpa["spec"]["behavior"]["scaleDown"]["policies"]
    assert policies
    for p in policies:
        assert p["type"] == "Pods" and p["value"] == 1, p
        assert p["periodSeconds"] >= grace, p
