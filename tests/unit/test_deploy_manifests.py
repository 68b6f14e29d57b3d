"""docker-compose.yml, deploy/Dockerfile and deploy/k8s, checked offline (no Docker engine, no cluster).

* docker-compose.yml against the Compose Specification schema vendored by ``check-jsonschema``.
* Every object of deploy/k8s (base and overlays, rendered by ``render`` below: the subset of
  kustomize these kustomizations use, refusing any other field) against the Kubernetes
  OpenAPI schemas shipped by ``kubernetes-validate``, strict (unknown fields are errors).
* The facts a schema cannot see: where Kafka writes, which listener the host reaches, health
  checks per service, probes that do not restart workers on a Redis outage, the Redis
  Cluster layout the worker's cluster mode expects, no committed credentials.

Nothing here builds the image or starts a container (deploy/README.md says what is not run).
"""

from __future__ import annotations

import base64
import copy
import functools
import importlib.resources
import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml
from repo_paths import ROOT

K8S = ROOT / "deploy" / "k8s"
KUSTOMIZATIONS = {"base": K8S / "base", "production": K8S / "overlays" / "production",
                  "example": K8S / "overlays" / "example"}
OVERLAYS = ("production", "example")
#: the oldest Kubernetes minor still commonly run, and the newest the installed schemas know
K8S_VERSIONS = ("1.28", kubernetes_validate.latest_version())
WORKLOADS = ("Deployment", "StatefulSet", "Job", "DaemonSet")
CLUSTER_SCOPED = ("Namespace",)


# --- compose -----------------------------------------------------------------------------

@functools.cache
def compose_validator() -> jsonschema.protocols.Validator:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads((vendor / "compose-spec.json").read_text())
    assert "$ref\": \"http" not in json.dumps(schema), "the schema must be self-contained (no fetch)"
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def compose_errors(doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in compose_validator().iter_errors(doc)]


@functools.cache
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_compose_file_follows_the_compose_specification() -> None:
    assert compose_errors(compose()) == []


def test_the_compose_validator_rejects_a_broken_file() -> None:
    broken = copy.deepcopy(compose())
    broken["services"]["worker"]["depends_on"]["kafka"]["condition"] = "service_warm"
    broken["services"]["redis"]["healthcheck"]["tset"] = ["CMD", "true"]
    errors = compose_errors(broken)
    assert any("service_warm" in e for e in errors) and any("tset" in e for e in errors), errors


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment as a mapping"
    return {k: str(v) for k, v in env.items()}


def test_kafka_writes_its_logs_and_metadata_on_its_volume() -> None:
    kafka = compose()["services"]["kafka"]
    log_dirs = _env(kafka)["KAFKA_LOG_DIRS"].split(",")
    mounts = [v.split(":")[1] for v in kafka["volumes"] if ":" in v and not v.startswith(("/", "."))]
    assert mounts, "a named volume"
    for d in log_dirs:
        assert any(d == m or d.startswith(m.rstrip("/") + "/") for m in mounts), (d, mounts)
    cluster_id = _env(kafka)["CLUSTER_ID"]
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "a KRaft cluster id is 16 bytes, base64url"


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    out = {}
    for item in value.split(","):
        name, rest = item.split("://")
        host, port = rest.rsplit(":", 1)
        out[name] = (host, int(port))
    return out


def test_kafka_is_reachable_from_the_containers_and_from_the_host() -> None:
    services = compose()["services"]
    env = _env(services["kafka"])
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    for name, (_host, port) in advertised.items():
        assert listeners[name][1] == port, f"{name} is advertised on a port it does not listen on"
    internal = compose()["x-mmr-env"]["KAFKA_BOOTSTRAP_SERVERS"]
    assert internal in {f"{h}:{p}" for h, p in advertised.values()}, "the containers' bootstrap is advertised"
    assert internal.split(":")[0] == "kafka"
    published = {int(p.split(":")[-2]): int(p.split(":")[-1]) for p in services["kafka"]["ports"]}
    host_side = [(h, p) for h, p in advertised.values() if h in ("localhost", "127.0.0.1")]
    assert host_side, "a listener advertised to the host"
    for _h, port in host_side:
        assert published.get(port) == port, f"the host-side listener {port} is published on the same port"


def test_every_service_has_its_own_health_check_and_waits_for_healthy_dependencies() -> None:
    services = compose()["services"]
    for name, svc in services.items():
        assert "healthcheck" in svc, f"{name}: no health check of its own"
        for dep, cond in svc.get("depends_on", {}).items():
            assert cond.get("condition") == "service_healthy", f"{name} -> {dep}"
            assert not services[dep]["healthcheck"].get("disable"), f"{name} waits for {dep}, which has no check"
    worker_check = json.dumps(services["worker"]["healthcheck"]["test"])
    for name in ("replay", "matchmaker"):
        assert json.dumps(services[name]["healthcheck"].get("test")) != worker_check, name


def test_every_service_of_the_project_image_can_build_it() -> None:
    """A service naming a local tag without ``build`` makes compose pull it from a registry."""
    for name, svc in compose()["services"].items():
        if str(svc.get("image", "")).startswith("mmr-stream"):
            assert svc.get("build", {}).get("dockerfile") == "deploy/Dockerfile", name


def test_the_worker_listens_where_its_check_and_port_mapping_look() -> None:
    worker = compose()["services"]["worker"]
    env = _env(worker)
    port = int(env["MMR_HTTP_PORT"])
    assert env["MMR_HTTP_HOST"] == "0.0.0.0"
    assert f"127.0.0.1:{port}/healthz" in json.dumps(worker["healthcheck"]["test"])
    assert any(p.endswith(f":{port}") for p in worker["ports"])
    assert f"worker:{port}" in _env(compose()["services"]["matchmaker"])["MMR_API"]


def test_the_matchmaker_check_reads_the_heartbeat_file_it_writes() -> None:
    mm = compose()["services"]["matchmaker"]
    assert _env(mm)["MMR_MATCHMAKER_HEARTBEAT"] in json.dumps(mm["healthcheck"]["test"])
    assert "MMR_MATCHMAKER_HEARTBEAT" in (ROOT / "deploy" / "matchmaker.py").read_text()


# --- Dockerfile ----------------------------------------------------------------------------

def _dockerfile() -> list[str]:
    """Instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "deploy" / "Dockerfile").read_text())
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _dockerignore_admits(path: str) -> bool:
    """The allow-list form used here: ``*`` first, then ``!path`` entries (last match wins)."""
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", ".dockerignore is an allow-list"
    admitted = False
    for ln in lines[1:]:
        if ln.startswith("!"):
            entry = ln[1:].rstrip("/")
            if path == entry or path.startswith(entry + "/"):
                admitted = True
    return admitted


def test_the_image_has_no_shared_health_check_and_no_hidden_failures() -> None:
    instructions = _dockerfile()
    assert not any(i.upper().startswith("HEALTHCHECK") and "NONE" not in i.upper() for i in instructions)
    assert not any("|| true" in i or "||true" in i for i in instructions)
    env = " ".join(i for i in instructions if i.startswith("ENV"))
    assert "MMR_HTTP_HOST=0.0.0.0" in env and "MMR_HTTP_PORT=6066" in env


def test_the_image_installs_from_the_constraints_file_in_its_context() -> None:
    runs = [i for i in _dockerfile() if i.startswith("RUN") and "pip install" in i]
    assert runs and all(re.search(r"(--constraint|-c) constraints\.txt", r) for r in runs), runs
    assert _dockerignore_admits("constraints.txt")
    if not (ROOT / "constraints.txt").exists():
        pytest.skip("constraints.txt is not in this checkout yet; the image build needs it")


def test_every_file_the_image_copies_is_in_the_build_context() -> None:
    copies = [i.split()[1:] for i in _dockerfile() if i.startswith("COPY") and "--from=" not in i]
    for *sources, _dest in copies:
        for src in sources:
            if src == ".":
                continue
            assert _dockerignore_admits(src), f"{src} is copied but .dockerignore leaves it out"
            assert (ROOT / src).exists(), src
    for needed in ("pyproject.toml", "README.md", "stream/cli.py", "deploy/matchmaker.py"):
        assert _dockerignore_admits(needed), needed
    assert not _dockerignore_admits(".venv/bin/python") and not _dockerignore_admits("tests/conftest.py")


# --- Kubernetes ----------------------------------------------------------------------------

SUPPORTED_KUSTOMIZE = {"apiVersion", "kind", "namespace", "labels", "resources", "secretGenerator",
                       "configMapGenerator", "images"}


def _env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; a deployment's secret.env is absent from the repository, so its
    committed ``.example`` stands in for it (same keys)."""
    if not path.exists():
        path = path.with_name(path.name + ".example")
    out = {}
    for ln in path.read_text().splitlines():
        if ln.strip() and not ln.lstrip().startswith("#"):
            key, _, value = ln.partition("=")
            out[key.strip()] = value
    return out


def _generated(kind: str, spec: dict[str, Any], kdir: Path) -> dict[str, Any]:
    assert set(spec) <= {"name", "envs", "literals", "files"}, spec
    data: dict[str, str] = {}
    for env in spec.get("envs", []):
        data.update(_env_file(kdir / env))
    for lit in spec.get("literals", []):
        key, _, value = lit.partition("=")
        data[key] = value
    for f in spec.get("files", []):
        key, _, name = f.rpartition("=")
        data[key or Path(name).name] = (kdir / name).read_text()
    if kind == "Secret":
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": spec["name"]}, "type": "Opaque",
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": spec["name"]}, "data": data}


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] in WORKLOADS:
        return [obj["spec"]["template"]["spec"]]
    return []


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for ps in _pod_specs(obj) for c in ps.get("initContainers", []) + ps["containers"]]


def render(kdir: Path) -> list[dict[str, Any]]:
    """``kustomize build`` for the fields the kustomizations here use (others are refused):
    resources (files and directories), generators, then namespace, labels and images applied
    to everything accumulated at this level, as kustomize does."""
    k = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    unsupported = set(k) - SUPPORTED_KUSTOMIZE
    assert not unsupported, f"{kdir}: {unsupported} not handled by the offline render; extend render()"
    objs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        path = (kdir / res).resolve()
        if path.is_dir():
            objs += render(path)
        else:
            objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    objs += [_generated("Secret", g, kdir) for g in k.get("secretGenerator", [])]
    objs += [_generated("ConfigMap", g, kdir) for g in k.get("configMapGenerator", [])]
    for obj in objs:
        meta = obj.setdefault("metadata", {})
        if "namespace" in k and obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        for lab in k.get("labels", []):
            assert set(lab) <= {"pairs"}, lab  # metadata labels only (no selectors, no templates)
            meta.setdefault("labels", {}).update(lab["pairs"])
        for img in k.get("images", []):
            for c in _containers(obj):
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    return objs


@functools.cache
def rendered(which: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(KUSTOMIZATIONS[which]))


def _find(objs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


@pytest.mark.parametrize("which", sorted(KUSTOMIZATIONS))
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_rendered_object_follows_the_kubernetes_schema(which: str, version: str) -> None:
    for obj in rendered(which):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_kubernetes_validator_rejects_broken_objects() -> None:
    worker = copy.deepcopy(_find(rendered("base"), "Deployment", "mmr-worker"))
    worker["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, K8S_VERSIONS[-1], strict=True)
    worker = copy.deepcopy(_find(rendered("base"), "Deployment", "mmr-worker"))
    worker["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, K8S_VERSIONS[-1], strict=True)


def test_only_the_overlays_name_the_image_and_namespace() -> None:
    """A kustomization's images: and namespace: apply to everything it renders, a base's
    before any overlay sees it: an image renamed in the base would no longer match the
    overlay's ``images:`` entry (``kustomize edit set image`` there would miss the workers)."""
    base = yaml.safe_load((KUSTOMIZATIONS["base"] / "kustomization.yaml").read_text())
    assert "images" not in base and "namespace" not in base
    for which in OVERLAYS:
        k = yaml.safe_load((KUSTOMIZATIONS[which] / "kustomization.yaml").read_text())
        assert [i["name"] for i in k["images"]] == ["mmr-stream"] and k["namespace"], which


@pytest.mark.parametrize("which", OVERLAYS)
def test_every_object_is_namespaced_and_every_image_pinned(which: str) -> None:
    for obj in rendered(which):
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace"), f"{obj['kind']}/{obj['metadata']['name']} has no namespace"
        for c in _containers(obj):
            name, _, tag = c["image"].partition(":")
            assert "/" in name or name.startswith("redis"), f"{c['name']}: {c['image']} (kustomize images: missed it)"
            assert tag and tag != "latest", c["image"]


@pytest.mark.parametrize("which", sorted(KUSTOMIZATIONS))
def test_every_referenced_config_map_secret_and_service_exists(which: str) -> None:
    objs = rendered(which)
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for obj in objs:
        for ps in _pod_specs(obj):
            for c in ps.get("initContainers", []) + ps["containers"]:
                for src in c.get("envFrom", []):
                    kind, ref = ("ConfigMap", src["configMapRef"]) if "configMapRef" in src else ("Secret",
                                                                                                  src["secretRef"])
                    assert (kind, ref["name"]) in names, (obj["metadata"]["name"], kind, ref)
                for e in c.get("env", []):
                    sk = e.get("valueFrom", {}).get("secretKeyRef")
                    if sk:
                        assert ("Secret", sk["name"]) in names
                        assert sk["key"] in _find(objs, "Secret", sk["name"])["data"], sk
                    if e["name"] == "MMR_API":
                        assert ("Service", urlparse(e["value"]).hostname) in names, e
            for v in ps.get("volumes", []):
                if "configMap" in v:
                    cm = v["configMap"]
                    if cm.get("optional") and ("ConfigMap", cm["name"]) not in names:
                        # created by the operator (a CA bundle): the README says how
                        assert f"configmap {cm['name']}" in (ROOT / "deploy" / "README.md").read_text(), cm
                    else:
                        assert ("ConfigMap", cm["name"]) in names, cm
                if "secret" in v:
                    assert ("Secret", v["secret"]["secretName"]) in names, v


def test_no_credentials_are_committed() -> None:
    tracked = subprocess.run(["git", "ls-files", "deploy", "docker-compose.yml"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert "deploy/k8s/base/secret.env" not in tracked
    ignored = subprocess.run(["git", "check-ignore", "-q", "deploy/k8s/base/secret.env"], cwd=ROOT)
    assert ignored.returncode == 0, "secret.env must be git-ignored"
    for f in tracked:
        if f.endswith((".yaml", ".yml")):
            for doc in yaml.safe_load_all((ROOT / f).read_text()):
                assert not (isinstance(doc, dict) and doc.get("kind") == "Secret"), f"{f} commits a Secret"
    # the placeholder of secret.env.example is refused where the password is used
    placeholder = _env_file(K8S / "base" / "secret.env.example")["MMR_REDIS_PASSWORD"]
    redis = _find(rendered("base"), "StatefulSet", "redis-cluster")
    assert placeholder and placeholder in redis["spec"]["template"]["spec"]["containers"][0]["args"][0]


def _http_routes() -> set[str]:
    return set(re.findall(r'@routes\.get\("([^"]+)"', (ROOT / "stream" / "service" / "http.py").read_text()))


def test_worker_liveness_does_not_depend_on_redis_and_readiness_does() -> None:
    objs = rendered("base")
    worker = _find(objs, "Deployment", "mmr-worker")["spec"]["template"]["spec"]["containers"][0]
    routes = _http_routes()
    live, ready = worker["livenessProbe"]["httpGet"]["path"], worker["readinessProbe"]["httpGet"]["path"]
    assert live in routes and ready in routes
    assert (live, ready) == ("/livez", "/readyz")  # readyz: 200 only while running and Redis answers
    assert live != ready
    http_py = (ROOT / "stream" / "service" / "http.py").read_text()
    handler = http_py[http_py.index(f'@routes.get("{live}"'):]
    handler = handler[handler.index("async def"):handler.index("@routes.", 1)]  # its body, not its documentation
    assert "store" not in handler and "redis" not in handler.lower(), f"{live} must not touch Redis"
    port = {p["name"]: p["containerPort"] for p in worker["ports"]}["http"]
    config = _find(objs, "ConfigMap", "mmr-stream")["data"]
    assert int(config["MMR_HTTP_PORT"]) == port and config["MMR_HTTP_HOST"] == "0.0.0.0"


def test_redis_is_a_cluster_with_a_replica_per_master_that_the_worker_reaches_in_cluster_mode() -> None:
    objs = rendered("base")
    config = _find(objs, "ConfigMap", "mmr-stream")["data"]
    assert config["MMR_REDIS_CLUSTER"] == "1"
    url = urlparse(config["REDIS_URL"])
    assert url.path in ("", "/", "/0"), "a Redis Cluster has only database 0"
    service = _find(objs, "Service", url.hostname or "")
    sts = _find(objs, "StatefulSet", "redis-cluster")
    assert service["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert url.port in [p["port"] for p in service["spec"]["ports"]]
    script = sts["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "--cluster-enabled yes" in script and "--appendonly yes" in script
    create = _find(objs, "Job", "redis-cluster-create")["spec"]["template"]["spec"]["containers"][0]["args"][0]
    replicas = int(re.search(r"--cluster-replicas (\d+)", create).group(1))  # type: ignore[union-attr]
    hosts = re.search(r"for i in ([\d ]+);", create).group(1).split()  # type: ignore[union-attr]
    assert replicas >= 1 and len(hosts) == sts["spec"]["replicas"]
    assert len(hosts) % (replicas + 1) == 0 and len(hosts) // (replicas + 1) >= 3, "three masters at least"
    assert sts["spec"]["serviceName"] in create


def test_the_example_overlay_adds_the_matchmaker_and_the_replay_job_to_the_service() -> None:
    base = {(o["kind"], o["metadata"]["name"]) for o in rendered("production")}
    example = {(o["kind"], o["metadata"]["name"]) for o in rendered("example")}
    assert base < example
    assert example - base == {("Deployment", "mmr-matchmaker"), ("Job", "mmr-replay")}
    job = _find(rendered("example"), "Job", "mmr-replay")["spec"]["template"]["spec"]["containers"][0]
    args = job["args"]
    assert args[0] == "replay" and "--broker" in args
    mm = _find(rendered("example"), "Deployment", "mmr-matchmaker")["spec"]["template"]["spec"]["containers"][0]
    beat = {e["name"]: e.get("value") for e in mm["env"]}["MMR_MATCHMAKER_HEARTBEAT"]
    assert beat in json.dumps(mm["livenessProbe"])


# --- Pod Security: the restricted profile, and where the pods write ----------------------------

#: volume types the "restricted" Pod Security Standard allows
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _workloads(which: str) -> list[dict[str, Any]]:
    return [o for o in rendered(which) if o["kind"] in WORKLOADS]


@pytest.mark.parametrize("which", sorted(KUSTOMIZATIONS))
def test_every_pod_meets_the_restricted_pod_security_standard(which: str) -> None:
    """kubernetes.io/docs/concepts/security/pod-security-standards (restricted), plus a read-only
    root file system: checked per container, with the pod's settings as the default."""
    for obj in _workloads(which):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        ps = obj["spec"]["template"]["spec"]
        pod = ps.get("securityContext", {})
        assert not any(ps.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        for v in ps.get("volumes", []):
            assert set(v) - {"name"} <= RESTRICTED_VOLUMES, (where, v)
        for c in ps.get("initContainers", []) + ps["containers"]:
            sc = {**pod, **c.get("securityContext", {})}
            name = f"{where} {c['name']}"
            assert sc.get("runAsNonRoot") is True, name
            assert sc.get("runAsUser", 1) != 0, name
            assert sc.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"), name
            csc = c.get("securityContext", {})
            assert csc.get("allowPrivilegeEscalation") is False, name
            assert csc.get("privileged", False) is False, name
            assert csc.get("capabilities", {}).get("drop") == ["ALL"], name
            assert set(csc.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}, name
            assert csc.get("readOnlyRootFilesystem") is True, name
            assert not any("hostPort" in p for p in c.get("ports", [])), name


def _mounts(ps: dict[str, Any], c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mount path -> the volume mounted there (with the mount's readOnly)."""
    volumes = {v["name"]: v for v in ps.get("volumes", [])}
    return {m["mountPath"]: {**volumes.get(m["name"], {"name": m["name"]}), "readOnly": m.get("readOnly", False)}
            for m in c.get("volumeMounts", [])}


def _image_env() -> dict[str, str]:
    """ENV of the Dockerfile's final stage."""
    instructions = _dockerfile()
    final = max(i for i, ins in enumerate(instructions) if ins.startswith("FROM"))
    env: dict[str, str] = {}
    for ins in instructions[final:]:
        if ins.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", ins))
    return env


def test_the_worker_writes_only_to_its_volumes_and_keeps_the_image_kernels() -> None:
    """With a read-only root file system the worker still needs: numba's cache (numba uses a cache
    directory only where it can write; stream/runtime/numba_cache.py), Faust's data directory and
    temporary files (MMR_STATE_DIR, default under $TMPDIR). The kernels the image compiled at build
    time are copied into the cache volume first, so no pod compiles them at start."""
    objs = rendered("base")
    worker = _find(objs, "Deployment", "mmr-worker")["spec"]["template"]["spec"]
    container = worker["containers"][0]
    mounts = _mounts(worker, container)
    cache = _image_env()["NUMBA_CACHE_DIR"]
    assert "emptyDir" in mounts[cache] and not mounts[cache]["readOnly"], "numba's cache on a writable volume"
    assert "emptyDir" in mounts["/tmp"] and not mounts["/tmp"]["readOnly"]
    config = _find(objs, "ConfigMap", "mmr-stream")["data"]
    assert "MMR_STATE_DIR" not in config or config["MMR_STATE_DIR"].startswith("/tmp/")
    assert "NUMBA_CACHE_DIR" not in config and "TMPDIR" not in config
    (init,) = [c for c in worker["initContainers"] if c["name"] == "numba-cache"]
    assert init["image"] == container["image"], "the kernels of the same image"
    (target,) = [path for path, v in _mounts(worker, init).items() if v["name"] == mounts[cache]["name"]]
    assert init["command"] == ["cp", "-a", f"{cache}/.", f"{target}/"]
    assert cache not in _mounts(worker, init), "the init container reads the image's cache, not the volume"


def test_redis_runs_as_its_image_user_and_owns_its_data() -> None:
    sts = _find(rendered("base"), "StatefulSet", "redis-cluster")
    ps = sts["spec"]["template"]["spec"]
    assert ps["securityContext"]["runAsUser"] == ps["securityContext"]["fsGroup"] == 999  # redis:7 images' redis
    (c,) = ps["containers"]
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/data"}
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    assert "--dir /data" in c["args"][0] and "/data/nodes.conf" in c["args"][0]


CA_MOUNT = "/etc/mmr/tls"
SECRETS_MOUNT = "/etc/mmr/secrets"


def _commented_settings(path: Path) -> dict[str, str]:
    """``# NAME: "value"`` lines of a manifest: the settings it documents without setting them."""
    return dict(re.findall(r'^\s*#\s*((?:MMR_|REDIS_)\w+):\s*"([^"]*)"', path.read_text(), re.M))


@pytest.mark.parametrize("which", OVERLAYS)
def test_every_pod_of_the_image_mounts_the_ca_bundle_the_tls_settings_name(which: str) -> None:
    from stream.service.config import known_names

    for obj in _workloads(which):
        ps = obj["spec"]["template"]["spec"]
        for c in ps["containers"]:
            if "mmr-stream" not in c["image"]:
                continue
            ca = _mounts(ps, c).get(CA_MOUNT)
            assert ca and ca["readOnly"], f"{obj['metadata']['name']}: no CA bundle in {CA_MOUNT}"
            assert ca["configMap"] == {"name": "mmr-ca-bundle", "optional": True}
    documented = _commented_settings(K8S / "base" / "configmap.yaml")
    tls_files = {k: v for k, v in documented.items() if k in ("MMR_REDIS_CA_CERTS", "MMR_KAFKA_SSL_CAFILE")}
    assert len(tls_files) == 2, documented
    for name, value in tls_files.items():
        assert value == f"{CA_MOUNT}/ca.crt", (name, value)
    known = known_names() | {"REDIS_URL", "KAFKA_BOOTSTRAP_SERVERS"}
    assert set(documented) <= known, set(documented) - known
    assert documented["REDIS_URL"].startswith("rediss://"), "TLS to Redis: rediss://"
    assert "--from-file=ca.crt=" in (ROOT / "deploy" / "README.md").read_text()


def test_file_secrets_are_documented_against_the_mounted_secret() -> None:
    """The ``*_FILE`` variants named in worker.yaml read files of the Secret mounted there."""
    from stream.service.config import known_names

    worker = _find(rendered("base"), "Deployment", "mmr-worker")["spec"]["template"]["spec"]
    secrets = _mounts(worker, worker["containers"][0])[SECRETS_MOUNT]
    assert secrets["readOnly"] and secrets["secret"]["secretName"] == "mmr-stream"
    assert secrets["secret"]["defaultMode"] & 0o007 == 0, "not world-readable"
    text = (K8S / "base" / "worker.yaml").read_text()
    named = re.findall(rf"name: (MMR_\w+)_FILE, value: {SECRETS_MOUNT}/(\w+)", text)
    assert {n for n, _ in named} == {"MMR_REDIS_PASSWORD", "MMR_KAFKA_SASL_PASSWORD"}, named
    keys = set(re.findall(r"^#?\s*(MMR_\w+)=", (K8S / "base" / "secret.env.example").read_text(), re.M))
    for setting, key in named:
        assert key == setting and key in keys, (setting, key)
        assert setting in known_names(), f"{setting}: the *_FILE variant of a setting that exists"
