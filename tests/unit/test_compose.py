"""The compose deployment, checked without a Docker engine: the file against the Compose
Specification's schema, every command against the CLI, every variable against .env and
the settings, and the image's install steps against the local ones."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer
import yaml

from medusa import credentials
from medusa import settings as settings_module
from medusa.credential_files import FEDERATION, REGISTRY, kafka_folder
from medusa.settings import REPO_ROOT, StackSettings
from medusa_apps.cli import app

pytestmark = pytest.mark.unit

COMPOSE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "infra" / "Dockerfile"
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")
ENDPOINT_VARIABLES = ("MEDUSA_EXTERNAL_KAFKA", "MEDUSA_EXTERNAL_REGISTRY_URL",
                      "MEDUSA_EXTERNAL_OTLP_ENDPOINT", "MEDUSA_EXTERNAL_CATALOG_URL",
                      "MEDUSA_EXTERNAL_KAFKA_LINKS", "MEDUSA_EXTERNAL_TOXIPROXY_URL")


def _dotenv() -> dict[str, str]:
    values = {}
    for line in (REPO_ROOT / ".env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def _interpolated(text: str, values: dict[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise AssertionError(f"docker-compose.yml uses ${{{name}}}, which .env does not set")
        return values[name]
    return VARIABLE.sub(substitute, text)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    model: dict[str, Any] = yaml.safe_load(_interpolated(COMPOSE.read_text(), _dotenv()))
    return model


def _medusa_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run a `medusa` command (others run Kafka, Jaeger or toxiproxy from
    the same image, under an entry point of their own)."""
    return {name: service for name, service in compose["services"].items()
            if service.get("image") == "medusa:local" and "entrypoint" not in service}


def test_the_compose_file_is_valid_by_the_compose_specification(compose) -> None:
    schemas = sorted((StackSettings().cache_dir / "compose").glob("compose-spec-*.json"))
    assert schemas, "no compose-spec schema in the cache; run `make setup`"
    schema = json.loads(schemas[-1].read_text())
    jsonschema.validate(compose, schema)


def test_every_variable_it_uses_is_set_in_dotenv() -> None:
    values = _dotenv()
    used = {match.group(1) for match in VARIABLE.finditer(COMPOSE.read_text())}
    assert used <= set(values), f"not in .env: {sorted(used - set(values))}"
    for base in ("BASE_IMAGE", "REGISTRY_BASE_IMAGE"):
        assert values[base] and not values[base].endswith(":latest"), f"{base}: pin a version"


def test_every_image_is_built_here_and_never_pulled(compose) -> None:
    """No image registry is needed: every part runs one of the project's two images."""
    built = {service["image"]: service["build"]["dockerfile"]
             for service in compose["services"].values() if "build" in service}
    assert built == {"medusa:local": "infra/Dockerfile",
                     "medusa-registry:local": "infra/registry.Dockerfile"}
    for name, service in compose["services"].items():
        assert service["image"] in built, f"{name}: {service['image']} is not built here"
        assert service.get("pull_policy") == "never", f"{name}: would try to pull"
    for dockerfile in built.values():
        text = (REPO_ROOT / dockerfile).read_text()
        bases = re.findall(r"^FROM \$\{([A-Z_]+)\}", text, re.MULTILINE)
        assert bases and set(bases) <= {"BASE_IMAGE", "REGISTRY_BASE_IMAGE"}, dockerfile


def test_startup_is_ordered_by_health_checks(compose) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (
                    f"{name} waits for {dependency} to be healthy, which has no health check")
    for needed in ("kafka-alpha", "kafka-beta", "registry", "jaeger", "catalog", "detector",
                   "sensors"):
        assert needed in services, f"no {needed} service"
    assert len([n for n in services if n.startswith("node-")]) >= 2


def _resolve(group: Any, args: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command the arguments name, and the arguments left for it.

    Typer carries its own copy of click, so commands are recognised by what they do.
    """
    command = group
    rest = list(args)
    while hasattr(command, "list_commands"):  # a group
        assert rest, f"{shlex.join(args)}: names a command group, not a command"
        name = rest.pop(0)
        found = command.commands.get(name)
        assert found is not None, f"{shlex.join(args)}: medusa has no command {name!r}"
        command = found
    return command, rest


def test_every_command_names_a_medusa_command_with_valid_options(compose) -> None:
    group = typer.main.get_command(app)
    for name, service in _medusa_services(compose).items():
        args = [str(arg) for arg in service["command"]]
        command, rest = _resolve(group, args)
        try:  # parses and converts every option, as the real start would
            command.make_context(args[0], rest)
        except Exception as error:
            format_message = getattr(error, "format_message", None)
            message = format_message() if format_message else str(error)
            raise AssertionError(f"service {name}: {shlex.join(args)}: {message}") from None


def test_the_image_runs_the_medusa_entry_point() -> None:
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["medusa"]' in text
    scripts = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'medusa = "medusa_apps.cli:main"' in scripts


def _settings_variables() -> set[str]:
    names = set()
    for value in vars(settings_module).values():
        if isinstance(value, type) and issubclass(value, settings_module.BaseSettings) and \
                value is not settings_module.BaseSettings:
            prefix = value.model_config.get("env_prefix", "")
            names |= {f"{prefix}{field}".upper() for field in value.model_fields}
    return names


def test_every_service_is_told_where_the_federation_is(compose) -> None:
    known = _settings_variables() | {"MEDUSA_VENV", "MEDUSA_PYTHON_BIN", "MEDUSA_CACHE_DIR",
                                     credentials.PARTICIPANT_VARIABLE}
    services = compose["services"]
    for name, service in _medusa_services(compose).items():
        environment = service.get("environment", {})
        for variable in ENDPOINT_VARIABLES:
            assert environment.get(variable), f"service {name}: {variable} is not set"
        for variable in environment:
            if variable.startswith("MEDUSA_"):
                assert variable in known, f"service {name}: no setting reads {variable}"
        kafka = dict(part.split("=", 1) for part in environment["MEDUSA_EXTERNAL_KAFKA"]
                     .split(","))
        for bootstrap in kafka.values():
            assert bootstrap.split(":")[0] in services, f"{name}: {bootstrap} is no service"


def _install_scripts(text: str) -> set[str]:
    return set(re.findall(r"infra/(install_[a-z_]+\.sh)", text))


def test_the_image_installs_with_the_same_scripts_as_a_developer_machine() -> None:
    image = DOCKERFILE.read_text()
    local = (REPO_ROOT / "Makefile").read_text() + (REPO_ROOT / "infra" / "install.sh").read_text()
    local_scripts = _install_scripts(local) | {
        f"{script}.sh" for script in re.findall(r'"\$here/(install_[a-z_]+)\.sh"',
                                                (REPO_ROOT / "infra" / "install.sh").read_text())}
    in_image = _install_scripts(image)
    assert {"install_python.sh", "install_spark_jars.sh", "install_spark_extensions.sh"} <= in_image
    assert in_image <= local_scripts, "the image installs with a script the machines do not use"
    # No second copy of the steps: the image runs no pip or Maven of its own.
    run_lines = " ".join(line for line in image.splitlines() if not line.lstrip().startswith("#"))
    assert "pip install" not in run_lines and "mvn " not in run_lines
    for script in in_image:
        assert (REPO_ROOT / "infra" / script).is_file(), script


def _pairs(value: str, separator: str) -> dict[str, str]:
    """``a=x,b=y`` (or ``A://x,B://y``, ``A:x,B:y``) as a mapping."""
    return dict(part.split(separator, 1) for part in value.split(","))


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _go_flag(command: list[str], name: str, default: str | None = None) -> str:
    """The value a Go program's ``flag`` package reads: ``-name=value`` or ``-name value``."""
    for index, argument in enumerate(command):
        for dashes in ("-", "--"):
            if argument == f"{dashes}{name}":
                return command[index + 1]
            if argument.startswith(f"{dashes}{name}="):
                return argument.split("=", 1)[1]
    assert default is not None, f"no -{name} in {shlex.join(command)}"
    return default


def test_toxiproxy_and_jaeger_are_the_builds_of_the_local_federation(compose) -> None:
    """The image builds them with infra/install_go_tools.sh, as `make setup` does."""
    assert "infra/install_go_tools.sh" in DOCKERFILE.read_text()
    services = compose["services"]
    assert services["toxiproxy"]["entrypoint"] == ["toxiproxy-server"]
    assert services["jaeger"]["entrypoint"] == ["jaeger"]
    assert services["jaeger"]["environment"]["JAEGER_HOST"] == "0.0.0.0"


def test_toxiproxy_serves_its_api_to_the_services_and_the_host_only(compose) -> None:
    proxy = compose["services"]["toxiproxy"]
    command = [str(argument) for argument in proxy["command"]]
    assert _go_flag(command, "host") == "0.0.0.0", "the other containers could not reach it"
    api_port = int(_go_flag(command, "port", "8474"))
    for name, service in _medusa_services(compose).items():
        url = service["environment"]["MEDUSA_EXTERNAL_TOXIPROXY_URL"]
        assert url == f"http://toxiproxy:{api_port}", name
    assert [str(port) for port in proxy["ports"]] == \
        [f"127.0.0.1:{_dotenv()['TOXIPROXY_PORT']}:{api_port}"]
    # The check runs the CLI, which exits 1 when the API does not answer and asks
    # http://localhost:8474 unless told otherwise.
    test = [str(argument) for argument in proxy["healthcheck"]["test"]]
    assert test[:2] == ["CMD", "toxiproxy-cli"] and test[-1] == "list"
    if api_port != 8474:
        assert f"http://localhost:{api_port}" in test, "the health check asks the wrong port"


def test_every_kafka_listener_is_mapped_advertised_and_on_a_port_of_its_own(compose) -> None:
    for name, service in compose["services"].items():
        environment = service.get("environment", {})
        if "KAFKA_LISTENERS" not in environment:
            continue
        listeners = _pairs(environment["KAFKA_LISTENERS"], "://")
        advertised = _pairs(environment["KAFKA_ADVERTISED_LISTENERS"], "://")
        protocols = _pairs(environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ":")
        ports = [_host_port(address)[1] for address in listeners.values()]
        assert len(ports) == len(set(ports)), f"{name}: two listeners on one port"
        assert set(advertised) <= set(listeners), f"{name}: advertises no listener"
        assert set(listeners) <= set(protocols), f"{name}: a listener without a protocol"


def test_every_link_runs_through_toxiproxy_to_a_listener_advertised_at_its_proxy(
        compose) -> None:
    services = compose["services"]
    proxy = services["toxiproxy"]
    config = _go_flag([str(argument) for argument in proxy["command"]], "config")
    # The image holds the repository's infra/ at /opt/medusa/src/infra.
    assert config.startswith("/opt/medusa/src/infra/"), f"toxiproxy reads {config}"
    source = config.removeprefix("/opt/medusa/src/")
    proxies = {p["name"]: p for p in json.loads((REPO_ROOT / source).read_text())}
    api_port = int(_go_flag([str(a) for a in proxy["command"]], "port", "8474"))
    listen_ports = [_host_port(p["listen"])[1] for p in proxies.values()]
    assert len(set(listen_ports)) == len(proxies) and api_port not in listen_ports
    for name, service in _medusa_services(compose).items():
        environment = service["environment"]
        kafka = _pairs(environment["MEDUSA_EXTERNAL_KAFKA"], "=")
        links = _pairs(environment["MEDUSA_EXTERNAL_KAFKA_LINKS"], "=")
        # One link per ordered pair of participants (as the local launcher's LinkLayout),
        # each a proxy that toxiproxy creates at start-up.
        assert set(links) == {f"{c}-from-{v}" for c in kafka for v in kafka if c != v}, name
        assert set(links) == set(proxies), f"{name}: the links are not {source}'s proxies"
        for link, bootstrap in links.items():
            cluster, viewer = link.split("-from-")
            proxy_host, proxy_port = _host_port(bootstrap)
            listen_host, listen_port = _host_port(proxies[link]["listen"])
            assert proxy_host == "toxiproxy", f"{name}: {link} bypasses toxiproxy"
            assert listen_host in ("0.0.0.0", "[::]", ""), f"{link}: others cannot reach it"
            assert listen_port == proxy_port, f"{name}: {link} is at {bootstrap}"
            assert proxies[link].get("enabled", True), f"{link} starts cut"
            # The proxy forwards to the cluster's listener for the viewer, which tells the
            # viewer's clients to come back through the proxy, never around it.
            kafka_service = _host_port(kafka[cluster])[0]
            upstream_host, upstream_port = _host_port(proxies[link]["upstream"])
            assert upstream_host == kafka_service, f"{link} forwards to {upstream_host}"
            kafka_environment = services[kafka_service]["environment"]
            listener = f"FROM_{viewer.upper()}"
            listeners = _pairs(kafka_environment["KAFKA_LISTENERS"], "://")
            assert listener in listeners, f"{kafka_service} has no listener {listener}"
            assert _host_port(listeners[listener])[1] == upstream_port, link
            advertised = _pairs(kafka_environment["KAFKA_ADVERTISED_LISTENERS"], "://")
            assert advertised[listener] == bootstrap, f"{kafka_service}: {listener}"
            protocols = _pairs(kafka_environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ":")
            assert protocols[listener] == "SASL_PLAINTEXT", f"{kafka_service}: {listener}"
    nodes = [n for n in services if n.startswith("node-")]
    for node in nodes:
        assert services[node]["depends_on"]["toxiproxy"]["condition"] == "service_healthy"


# Security: the compose deployment is secured as the local federation is.

def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """Container path -> (volume or host path, options)."""
    found = {}
    for volume in service.get("volumes", []):
        source, target, *options = str(volume).split(":")
        found[target] = (source, options)
    return found


def _credentials_holders(compose: dict[str, Any]) -> dict[str, str]:
    """Volume -> the holder folder the credentials service writes into it."""
    service = compose["services"]["credentials"]
    command = [str(argument) for argument in service["command"]]
    root = command[command.index("--dir") + 1]
    holders = {}
    for target, (source, _) in _mounts(service).items():
        assert target.startswith(f"{root}/"), f"credentials: {target} is outside {root}"
        holders[source] = target.removeprefix(f"{root}/")
    return holders


def _participants(compose: dict[str, Any]) -> list[str]:
    command = [str(argument) for argument in compose["services"]["credentials"]["command"]]
    return command[command.index("--participants") + 1].split(",")


def test_the_credentials_service_makes_every_participants_secrets_once_for_the_containers_user(
        compose) -> None:
    services = compose["services"]
    service = services["credentials"]
    command = [str(argument) for argument in service["command"]]
    assert command[:2] == ["credentials", "init"]
    assert service["restart"] == "no", "it runs once per start, and keeps what it made"
    kafka = _pairs(services["catalog"]["environment"]["MEDUSA_EXTERNAL_KAFKA"], "=")
    assert sorted(_participants(compose)) == sorted(kafka)
    owner = command[command.index("--owner") + 1]
    uid = re.search(r"useradd [^\n]*--uid (\d+)", DOCKERFILE.read_text())
    assert uid, "infra/Dockerfile: give the medusa user a fixed uid"
    # Every part, Kafka's brokers too, runs as the image's medusa user.
    assert owner.split(":")[0] == uid.group(1) == "1000", owner
    expected = {FEDERATION, REGISTRY, *_participants(compose),
                *(kafka_folder(p) for p in _participants(compose))}
    assert set(_credentials_holders(compose).values()) == expected


def test_every_part_holds_only_its_holders_secrets_and_waits_for_them(compose) -> None:
    services = compose["services"]
    holders = _credentials_holders(compose)
    participants = _participants(compose)
    for name, service in _medusa_services(compose).items():
        if name == "credentials":
            continue
        assert service["depends_on"]["credentials"]["condition"] == \
            "service_completed_successfully", name
        path = Path(service["environment"]["MEDUSA_CREDENTIALS_FILE"])
        mounts = _mounts(service)
        assert str(path.parent) in mounts, f"{name}: no volume at {path.parent}"
        volume, options = mounts[str(path.parent)]
        assert options == ["ro"], f"{name}: mount its secrets read-only"
        command = [str(argument) for argument in service["command"]]
        acting = service["environment"].get(credentials.PARTICIPANT_VARIABLE)
        if "--participant" in command:
            assert acting == command[command.index("--participant") + 1], name
        # A participant's parts hold its secrets only; the federation's services all.
        assert holders[volume] == (acting if acting else FEDERATION), name
        assert acting is None or acting in participants, name
    for name in ("kafka-alpha", "kafka-beta"):
        assert services[name]["depends_on"]["credentials"]["condition"] == \
            "service_completed_successfully"


def test_every_kafka_listener_authenticates_and_a_partner_needs_an_acl(compose) -> None:
    services = compose["services"]
    holders = _credentials_holders(compose)
    for participant in _participants(compose):
        name = f"kafka-{participant}"
        service = services[name]
        environment = service["environment"]
        protocols = _pairs(environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ":")
        assert set(protocols.values()) == {"SASL_PLAINTEXT"}, f"{name}: {protocols}"
        assert environment["KAFKA_SASL_ENABLED_MECHANISMS"] == credentials.SCRAM_MECHANISM
        assert environment["KAFKA_AUTHORIZER_CLASS_NAME"] == \
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        assert environment["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
        assert set(environment["KAFKA_SUPER_USERS"].split(";")) == \
            {f"User:{credentials.ADMIN}", f"User:{participant}"}, name
        # Started by our script, which formats the storage with the SCRAM users and reads
        # the brokers' login from the secrets at the path it expects.
        assert service["entrypoint"][-1] == "/opt/medusa/src/infra/kafka/compose-broker.sh"
        volume, options = _mounts(service)["/etc/kafka/secrets"]
        assert holders[volume] == kafka_folder(participant) and options == ["ro"], name
        assert service["healthcheck"]["test"] == ["CMD", "kafka-ready"]
        assert "/etc/kafka/secrets/admin-client.properties" in \
            (REPO_ROOT / "infra" / "docker" / "bin" / "kafka-ready").read_text()


def test_registry_writes_go_through_the_gateway(compose) -> None:
    services = compose["services"]
    holders = _credentials_holders(compose)
    store = services["registry-store"]
    assert "ports" not in store, "the registry itself must not be reachable from the host"
    login = Path(store["environment"]["QUARKUS_CONFIG_LOCATIONS"])
    volume, _ = _mounts(store)[str(login.parent)]
    assert holders[volume] == REGISTRY
    gateway = [str(argument) for argument in services["registry"]["command"]]
    assert gateway[:2] == ["schemas", "gateway"]
    assert gateway[gateway.index("--upstream") + 1] == "http://registry-store:8080"
    port = gateway[gateway.index("--port") + 1]
    for name, service in _medusa_services(compose).items():
        assert service["environment"]["MEDUSA_EXTERNAL_REGISTRY_URL"].startswith(
            f"http://registry:{port}/"), name


def test_only_what_is_published_leaves_the_internal_network(compose) -> None:
    """Every part talks to the others on `federation`, which has no route out; only the
    parts with a port on the host's 127.0.0.1 are also on `published`."""
    assert compose["networks"]["federation"].get("internal") is True
    for name, service in compose["services"].items():
        networks = service.get("networks")
        assert networks and "federation" in networks, f"{name}: not on the internal network"
        if "ports" in service:
            assert set(networks) == {"federation", "published"}, name
            assert all(str(port).startswith("127.0.0.1:") for port in service["ports"]), name
        else:
            assert list(networks) == ["federation"], f"{name}: reaches out, publishes nothing"
