"""Settings: every TUNEPLANE_* value is checked at start-up and a bad one is named."""

from pathlib import Path

import pytest

from helpers.paths import CHECKOUT
from tpnode_tui.config.redact import redact_url
from tpnode_tui.config.settings import DECLARED, Settings, load_settings
from tpnode_tui.config.statedir import state_dir_exists
from tpnode_tui.config.values import parse_duration
from tpnode_tui.model.errors import BadRequest, ConfigError


def test_defaults_without_environment():
    s = load_settings({})
    assert s == Settings()
    assert s.probe.kind == "auto" and s.cards.mem_busy_mib == 512 and s.lock.redis_url is None


def test_every_variable_is_read():
    env = {
        "TUNEPLANE_LOCAL_GPU_COUNT": "4",
        "TUNEPLANE_CLUSTER_PROFILE": "h200-sxm",
        "TUNEPLANE_LOCAL_CHECK_EXTERNAL_GPUS": "false",
        "TUNEPLANE_LOCAL_CHECK_GPU_HEALTH": "0",
        "TUNEPLANE_MEM_BUSY_MIB": "1024",
        "TUNEPLANE_PROBE": "simulated:/tmp/n.json",
        "TUNEPLANE_PROBE_TIMEOUT_S": "2.5",
        "TUNEPLANE_NVIDIA_GPUS_DIR": "/tmp/gpus",
        "TUNEPLANE_RUNTIME": "process",
        "TUNEPLANE_DOCKER_GPU_MODE": "env",
        "TUNEPLANE_STATE_DIR": "/tmp/st",
        "TUNEPLANE_REDIS_URL": "redis://localhost:6379/1",
        "TUNEPLANE_LOCK_LEASE_MS": "5000",
        "TUNEPLANE_LOCK_RETRY_MS": "20",
        "TUNEPLANE_HOLD_IMAGE": "busybox:1.36",
        "TUNEPLANE_FENCE": "required",
        "TUNEPLANE_PROC_DEVICES": "/tmp/devices",
        "TUNEPLANE_MIG_MINORS": "/tmp/mig-minors",
        "TUNEPLANE_ALLOW_UNVERIFIED": "yes",
        "TUNEPLANE_AGENT": "off",
        "TUNEPLANE_AGENT_SOCKET": "/tmp/a.sock",
        "TUNEPLANE_NODE_ENV_FILE": "/tmp/node.env",
        "TUNEPLANE_OPERATORS_GROUP": "gpu-admins",
        "TUNEPLANE_MAX_CARDS_PER_USER": "2",
        "TUNEPLANE_MAX_CARDS_FOR": "alice=4, @students=1",
        "TUNEPLANE_IMAGES": "busybox:*, nvcr.io/*",
        "TUNEPLANE_LOG_MAX_MB": "5",
        "TUNEPLANE_LOG_ACCOUNT_MB": "0.5",
        "TUNEPLANE_MAX_BODY_KIB": "128",
        "TUNEPLANE_MAX_COMMAND_KIB": "8",
        "TUNEPLANE_MAX_COMMAND_ARGS": "64",
        "TUNEPLANE_MAX_ENV_VARS": "100",
        "TUNEPLANE_MAX_ENV_KIB": "16",
        "TUNEPLANE_MAX_CWD_BYTES": "1024",
        "TUNEPLANE_MAX_REASON_CHARS": "200",
        "TUNEPLANE_MAX_QUEUED_PER_USER": "5",
        "TUNEPLANE_MAX_QUEUED": "50",
        "TUNEPLANE_MAX_DURATION_DAYS": "7",
        "TUNEPLANE_MAX_PAGE": "500",
        "TUNEPLANE_MAX_CONNECTIONS_PER_USER": "8",
        "TUNEPLANE_MAX_EXITED_PER_USER": "3",
        "TUNEPLANE_MAX_CONNECTION_RATE_PER_USER": "20",
        "TUNEPLANE_IDLE_RESERVATION_MIN": "45",
        "TUNEPLANE_XID_DRAIN": "79, 48,48",
        "TUNEPLANE_XID_IGNORE": "13",
        "TUNEPLANE_EVICT_GRACE_S": "2.5",
        "TUNEPLANE_CHECK_TIMEOUT_S": "12",
        "TUNEPLANE_CHECK_COMMAND": "dcgmi diag -r 2 -i {card} --note 'card {uuid}'",
        "TUNEPLANE_CHECK_COMMAND_TIMEOUT_S": "600",
        "TUNEPLANE_RETURN_AFTER_CHECK": "on",
        "TUNEPLANE_BOOT_ID": "/tmp/boot_id",
        "TUNEPLANE_FLEET_URL": "redis://fleet:6379/2",
        "TUNEPLANE_NODE_NAME": "gpu-07",
        "TUNEPLANE_FLEET_PUBLISH_S": "2.5",
        "TUNEPLANE_METRICS_ADDR": "[::]:9400",
        "TUNEPLANE_HOST": "ssh://alice@gpu-07:2222",
        "TUNEPLANE_SSH_ADDRESS": "gpu-07.example.org",
        "TUNEPLANE_USAGE_DAYS": "30",
        "TUNEPLANE_USAGE_HOLDS_PER_USER": "200",
        "TUNEPLANE_RECLAIM_IDLE_AFTER": "2h",
        "TUNEPLANE_RECLAIM_GRACE": "1h30m",
        "TUNEPLANE_FLAG_IDLE_JOB_AFTER": "off",
        "TUNEPLANE_NOTIFY_BEFORE_END": "15m",
        "TUNEPLANE_NOTIFY_TERMINALS": "no",
        "TUNEPLANE_NOTIFY_MAX_URLS": "3",
        "TUNEPLANE_NOTIFY_QUEUE": "7",
        "TUNEPLANE_NOTIFY_EVENT_PER_HOUR": "4",
        "TUNEPLANE_NOTIFY_ACCOUNT_PER_HOUR": "40",
        "TUNEPLANE_NOTIFY_TIMEOUT_S": "12.5",
        "TUNEPLANE_WEB_LISTEN": ":8480",
        "TUNEPLANE_WEB_TOKEN": " 0123456789abcdef0123 ",
        "TUNEPLANE_WEB_SHOW_COMMANDS": "on",
    }
    assert set(env) == {d.env for d in DECLARED.values()}
    s = load_settings(env)
    cards, probe, runtime = s.cards, s.probe, s.runtime
    assert (cards.count, cards.profile, cards.check_external, cards.check_health) == (4, "h200-sxm", False, False)
    assert (cards.mem_busy_mib, cards.allow_unverified) == (1024, True)
    assert (probe.kind, probe.timeout_s, probe.simulated_path) == ("simulated:/tmp/n.json", 2.5, Path("/tmp/n.json"))
    assert (runtime.kind, runtime.docker_gpu_mode, runtime.hold_image) == ("process", "env", "busybox:1.36")
    assert probe.gpus_dir == Path("/tmp/gpus")
    assert (runtime.fence, runtime.proc_devices, runtime.mig_minors) == (
        "required",
        Path("/tmp/devices"),
        Path("/tmp/mig-minors"),
    )
    assert (s.state.dir, s.state.log_max_mb, s.state.log_account_mb) == (Path("/tmp/st"), 5.0, 0.5)
    limits = s.limits
    assert (limits.body_kib, limits.command_kib, limits.command_args) == (128, 8, 64)
    assert (limits.env_vars, limits.env_kib, limits.cwd_bytes, limits.reason_chars) == (100, 16, 1024, 200)
    assert (limits.queued_per_user, limits.queued, limits.page, limits.connections_per_user) == (5, 50, 500, 8)
    assert limits.connection_rate_per_user == 20
    assert (limits.duration_days, limits.duration_s, limits.exited_per_user) == (7.0, 7 * 86400.0, 3)
    assert (s.lock.redis_url, s.lock.lease_ms, s.lock.retry_ms) == ("redis://localhost:6379/1", 5000, 20)
    agent, policy, triage, fleet = s.agent, s.policy, s.triage, s.fleet
    assert (agent.mode, agent.socket, agent.metrics_addr) == ("off", Path("/tmp/a.sock"), ("::", 9400))
    assert agent.env_file == Path("/tmp/node.env")
    assert (str(agent.host), agent.host.user, agent.host.port) == ("alice@gpu-07:2222", "alice", 2222)
    assert (policy.operators_group, policy.max_cards_per_user) == ("gpu-admins", 2)
    assert (policy.max_cards_for, policy.images) == ((("alice", 4), ("@students", 1)), ("busybox:*", "nvcr.io/*"))
    assert (triage.xid_drain, triage.xid_ignore) == ((48, 79), (13,))
    assert (triage.idle_reservation_min, triage.evict_grace_s) == (45, 2.5)
    assert triage.check_command == ("dcgmi", "diag", "-r", "2", "-i", "{card}", "--note", "card {uuid}")
    assert (triage.check_timeout_s, triage.check_command_timeout_s, triage.return_after_check) == (12, 600, True)
    assert triage.boot_id == Path("/tmp/boot_id")
    assert (fleet.url, fleet.node_name, fleet.node) == ("redis://fleet:6379/2", "gpu-07", "gpu-07")
    assert fleet.publish_s == 2.5
    assert str(fleet.ssh_address) == "gpu-07.example.org"
    usage = s.usage
    assert (usage.days, usage.reclaim_idle_after_s, usage.reclaim_grace_s) == (30, 7200, 5400)
    assert usage.holds_per_user == 200
    assert usage.flag_idle_job_after_s is None
    notify = s.notify
    assert (notify.before_end_s, notify.terminals, notify.urls, notify.queue) == (900, False, 3, 7)
    assert (notify.event_per_hour, notify.account_per_hour, notify.timeout_s) == (4, 40, 12.5)
    assert (s.web.listen, s.web.token, s.web.show_commands) == (("0.0.0.0", 8480), "0123456789abcdef0123", True)


@pytest.mark.parametrize(
    "given", ["-oProxyCommand=touch /tmp/x", "a b", "bob;id@x", "x:0", "x:65536", "@x", "bob@", "x/y", "x:22:33"]
)
def test_an_ssh_host_that_is_not_a_destination_is_refused(given):
    with pytest.raises(ConfigError, match="TUNEPLANE_HOST"):
        load_settings({"TUNEPLANE_HOST": given})


def test_fleet_and_metrics_settings():
    import socket

    s = load_settings({})
    assert (s.fleet.url, s.agent.metrics_addr, s.fleet.publish_s) == (None, None, 10.0)
    assert s.fleet.node == socket.gethostname()
    assert load_settings({"TUNEPLANE_METRICS_ADDR": ":9400"}).agent.metrics_addr == ("0.0.0.0", 9400)
    assert load_settings({"TUNEPLANE_METRICS_ADDR": "127.0.0.1:19400"}).agent.metrics_addr == ("127.0.0.1", 19400)
    assert "s3cret" not in load_settings({"TUNEPLANE_FLEET_URL": "redis://:s3cret@h/0"}).fleet.url_safe


def test_fair_share_defaults_reclaim_off_and_flagging_after_an_hour():
    usage = load_settings({}).usage
    assert (usage.days, usage.reclaim_idle_after_s, usage.reclaim_grace_s) == (90, None, 900)
    assert usage.flag_idle_job_after_s == 3600
    on = load_settings({"TUNEPLANE_RECLAIM_IDLE_AFTER": " 2h ", "TUNEPLANE_FLAG_IDLE_JOB_AFTER": "45m"}).usage
    assert (on.reclaim_idle_after_s, on.flag_idle_job_after_s) == (7200, 2700)
    assert load_settings({"TUNEPLANE_RECLAIM_IDLE_AFTER": "OFF"}).usage.reclaim_idle_after_s is None
    with pytest.raises(ConfigError, match=r"TUNEPLANE_RECLAIM_IDLE_AFTER='2x': .*2h.* \(or off: never\)"):
        load_settings({"TUNEPLANE_RECLAIM_IDLE_AFTER": "2x"})


def test_flags_override_the_environment():
    s = load_settings({"TUNEPLANE_RUNTIME": "docker"}, runtime_kind="process", probe_kind=None)
    assert s.runtime.kind == "process" and s.probe.kind == "auto"


@pytest.mark.parametrize(
    "var,value",
    [
        ("TUNEPLANE_LOCAL_GPU_COUNT", "two"),
        ("TUNEPLANE_LOCAL_GPU_COUNT", "-1"),
        ("TUNEPLANE_MEM_BUSY_MIB", "0"),
        ("TUNEPLANE_PROBE", "nvlm"),
        ("TUNEPLANE_PROBE", "simulated:"),
        ("TUNEPLANE_RUNTIME", "podman"),
        ("TUNEPLANE_DOCKER_GPU_MODE", "all"),
        ("TUNEPLANE_FENCE", "yes"),
        ("TUNEPLANE_LOCAL_CHECK_GPU_HEALTH", "maybe"),
        ("TUNEPLANE_REDIS_URL", "http://x"),
        ("TUNEPLANE_PROBE_TIMEOUT_S", "nan"),
        ("TUNEPLANE_PROBE_TIMEOUT_S", "inf"),
        ("TUNEPLANE_PROBE_TIMEOUT_S", "-inf"),
        ("TUNEPLANE_PROBE_TIMEOUT_S", "601"),
        ("TUNEPLANE_PROBE_TIMEOUT_S", "1e1"),
        ("TUNEPLANE_LOCAL_GPU_COUNT", "٣"),
        ("TUNEPLANE_MEM_BUSY_MIB", "1_000"),
        ("TUNEPLANE_LOCK_LEASE_MS", "5"),
        ("TUNEPLANE_LOCAL_GPU_COUNT", "100000000"),
        ("TUNEPLANE_IDLE_RESERVATION_MIN", "0"),
        ("TUNEPLANE_XID_DRAIN", "79,x"),
        ("TUNEPLANE_XID_IGNORE", "-13"),
        ("TUNEPLANE_EVICT_GRACE_S", "0"),
        ("TUNEPLANE_FLEET_URL", "http://fleet"),
        ("TUNEPLANE_NODE_NAME", "gpu 07"),
        ("TUNEPLANE_NODE_NAME", "-gpu"),
        ("TUNEPLANE_FLEET_PUBLISH_S", "0"),
        ("TUNEPLANE_FLEET_PUBLISH_S", "301"),
        ("TUNEPLANE_METRICS_ADDR", "9400"),
        ("TUNEPLANE_METRICS_ADDR", "0.0.0.0:http"),
        ("TUNEPLANE_METRICS_ADDR", "0.0.0.0:70000"),
        ("TUNEPLANE_USAGE_DAYS", "0"),
        ("TUNEPLANE_USAGE_DAYS", "3651"),
        ("TUNEPLANE_USAGE_HOLDS_PER_USER", "0"),
        ("TUNEPLANE_MAX_EXITED_PER_USER", "-1"),
        ("TUNEPLANE_RECLAIM_IDLE_AFTER", "0"),
        ("TUNEPLANE_RECLAIM_IDLE_AFTER", "2 hours"),
        ("TUNEPLANE_RECLAIM_GRACE", "off"),
        ("TUNEPLANE_RECLAIM_GRACE", "0.5s"),
        ("TUNEPLANE_FLAG_IDLE_JOB_AFTER", "367d"),
    ],
)
def test_a_bad_value_is_refused_with_its_name(var, value):
    with pytest.raises(ConfigError, match=var):
        load_settings({var: value})


def test_redis_password_is_redacted():
    assert redact_url("redis://:s3cret@h:6380/0") == "redis://:***@h:6380/0"
    assert redact_url("rediss://user:s3cret@h/0") == "rediss://user:***@h/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert redact_url("unix:///run/redis.sock?db=0&password=s3cret") == "unix:///run/redis.sock?db=0&password=***"
    s = load_settings({"TUNEPLANE_REDIS_URL": "redis://:s3cret@h:6380/0"})
    assert "s3cret" not in s.lock.redis_url_safe


def test_a_bad_redis_url_error_does_not_print_its_password():
    with pytest.raises(ConfigError) as err:
        load_settings({"TUNEPLANE_REDIS_URL": "http://:s3cret@h/0"})
    assert "s3cret" not in str(err.value)


def test_a_bad_flag_is_named_by_its_flag():
    with pytest.raises(ConfigError, match="--gpu-count='abc' is not a whole number"):
        load_settings({}, cards_count="abc")


def test_a_relative_state_dir_is_made_absolute_so_every_shell_shares_one_lock(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_settings({"TUNEPLANE_STATE_DIR": "st"}).state.dir == tmp_path / "st"


def test_the_settings_table_names_every_variable_flag_and_default():
    doc = (CHECKOUT / "docs" / "configuration.md").read_text()
    table = [line for line in doc.splitlines() if line.startswith("| `TUNEPLANE_")]
    documented = {line.split("`")[1]: line for line in table}
    assert set(documented) == {d.env for d in DECLARED.values()}
    for declared in DECLARED.values():
        if declared.flag:
            assert f"`{declared.flag}`" in documented[declared.env], declared.env


def test_the_web_page_listens_on_this_machine_asks_no_token_and_hides_commands_unless_told():
    web = load_settings({}).web
    assert (web.listen, web.token, web.show_commands) == (("127.0.0.1", 8470), None, False)
    assert load_settings({"TUNEPLANE_WEB_TOKEN": "  "}).web.token is None


@pytest.mark.parametrize(
    "given,said",
    [
        ("short", "is 5 characters: give at least 16"),
        ("0123456789 abcdef", "printable ASCII with no space"),
        ("0123456789abcdef;x", "printable ASCII with no space"),
        ("0123456789abcdéf", "printable ASCII with no space"),
    ],
)
def test_a_web_token_that_could_be_guessed_or_cannot_travel_in_a_header_is_refused_without_echoing_it(given, said):
    with pytest.raises(ConfigError, match=f"TUNEPLANE_WEB_TOKEN.*{said}") as err:
        load_settings({"TUNEPLANE_WEB_TOKEN": given})
    assert given not in str(err.value)


def test_a_check_command_is_read_as_words_never_through_a_shell_and_bad_quoting_is_refused():
    assert load_settings({}).triage.check_command == ()
    assert load_settings({"TUNEPLANE_CHECK_COMMAND": "burn.sh; rm -rf /"}).triage.check_command == (
        "burn.sh;",
        "rm",
        "-rf",
        "/",
    )
    with pytest.raises(ConfigError, match="TUNEPLANE_CHECK_COMMAND=.*is not a command line"):
        load_settings({"TUNEPLANE_CHECK_COMMAND": "dcgmi diag 'unclosed"})


def test_xid_lists_default_to_the_catalog_and_none_means_no_drains():
    s = load_settings({})
    assert 79 in s.triage.xid_drain and 48 in s.triage.xid_drain and 13 not in s.triage.xid_drain
    assert s.triage.xid_ignore == ()
    assert load_settings({"TUNEPLANE_XID_DRAIN": "none"}).triage.xid_drain == ()


def test_an_xid_both_drained_and_ignored_is_refused():
    with pytest.raises(ConfigError, match="both name XID 48"):
        load_settings({"TUNEPLANE_XID_IGNORE": "48"})


def test_numbers_are_plain_ascii_decimals():
    assert load_settings({"TUNEPLANE_PROBE_TIMEOUT_S": " 600 "}).probe.timeout_s == 600
    assert load_settings({"TUNEPLANE_PROBE_TIMEOUT_S": "0.5"}).probe.timeout_s == 0.5
    assert load_settings({"TUNEPLANE_LOCAL_GPU_COUNT": "+8"}).cards.count == 8


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("1h30m", 5400), ("1d", 86400), ("1", 1), ("2.5", 2.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0.0001s", "0.5", "0s", "٣h", "1_0s", "inf", "nan", "1e3", "367d"])
def test_a_duration_under_a_second_or_not_in_ascii_digits_is_refused(text):
    with pytest.raises(BadRequest):
        parse_duration(text)


def test_a_state_dir_is_a_directory_or_not_there_yet(tmp_path):
    assert state_dir_exists(tmp_path) is True
    assert state_dir_exists(tmp_path / "later") is False
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        state_dir_exists(tmp_path / "file")
    with pytest.raises(ConfigError, match="inside a file"):
        state_dir_exists(tmp_path / "file" / "state")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="link to nothing"):
        state_dir_exists(tmp_path / "dangling")


def test_no_secret_setting_shows_in_the_settings_repr():
    """A password in a Redis URL or the web page's token never reaches a log line
    or a traceback that shows the settings."""
    s = load_settings(
        {
            "TUNEPLANE_REDIS_URL": "redis://:lock-secret-1@127.0.0.1:6379/0",
            "TUNEPLANE_FLEET_URL": "redis://:fleet-secret-2@127.0.0.1:6379/1",
            "TUNEPLANE_WEB_TOKEN": "web-secret-3-0123456789",
        }
    )
    shown = repr(s)
    for secret in ("lock-secret-1", "fleet-secret-2", "web-secret-3"):
        assert secret not in shown
    assert s.web.token == "web-secret-3-0123456789"  # kept, only not shown
