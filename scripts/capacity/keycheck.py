"""Find the Serve config keys Ray 2.60 no longer takes (:mod:`~scripts.capacity.renamed`), before ``serve deploy``.

:func:`check_serve_keys` (one printed finding per key) and :func:`serve_key_findings` (the
:class:`~scripts.capacity.findings.Finding` objects) need no cluster, so they run before
``serve deploy``; :func:`~scripts.capacity.check.check_capacity` puts the same findings in its report,
so any old key fails the report. :func:`upgrade_serve_keys` returns the config with each value under
its current key, which is what the capacity check then judges. :func:`deprecated_key_notes`: keys
Ray 2.60 still honours but has deprecated, as notes (they do not fail).
"""
from __future__ import annotations

import copy
import json
from typing import Any, Iterator, Mapping

from scripts.capacity.findings import Finding
from scripts.capacity.renamed import (ACTOR, APP, AUTOSCALING, DEPLOYMENT, DEPRECATED_KEYS, HTTP, KEY_CHANGES,
                                      SINGLE_APP_FORMAT, TOP, KeyChange)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _changes(scope: str) -> list[KeyChange]:
    return [c for c in KEY_CHANGES if c.scope == scope]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _apps(config: Any) -> Iterator[tuple[str, str, Mapping]]:
    """(path, app name, app mapping) of each application, named as parse_serve_config names them."""
    if isinstance(config, Mapping) and isinstance(config.get("applications"), list):
        for i, app in enumerate(config["applications"]):
            if isinstance(app, Mapping):
                yield f"applications[{i}]", str(app.get("name", "default")), app
    elif isinstance(config, Mapping) and ("deployments" in config or "import_path" in config):
        yield "", str(config.get("name", "default")), config


def _deployments(config: Any) -> Iterator[tuple[str, str, Mapping]]:
    """(path, full name, deployment mapping) of each deployment (full name as DeploymentSpec.full_name)."""
    if isinstance(config, list):
        for j, dep in enumerate(config):
            if isinstance(dep, Mapping):
                yield f"deployments[{j}]", str(dep.get("name", f"deployments[{j}]")), dep
        return
    for path, app_name, app in _apps(config):
        deps = app.get("deployments")
        if isinstance(deps, list):
            for j, dep in enumerate(deps):
                if isinstance(dep, Mapping):
                    here = _join(path, f"deployments[{j}]")
                    yield here, f"{app_name}/{dep.get('name', here)}", dep


def _finding(change: KeyChange, label: str, parent: str, value: Any, *, current: Any = None,
             fix: str | None = None) -> Finding:
    path = _join(parent, change.old)
    effect = change.effect.format(value=_show(value))
    if change.kind == "renamed_key":
        message = f"{path} is the old name of {change.target} ({change.history}). {effect}"
    elif change.kind == "moved_key":
        message = f"{path} belongs in {change.target}. {effect}"
    else:
        message = f"{path} was removed from Ray Serve ({change.history}). {effect}"
    where = f" in {parent}" if parent else ""
    if fix is None:
        if change.new is None:
            fix = f"delete {change.old}{where}"
        elif current is not None:
            fix = f"delete {change.old}{where}: {change.target} is already set ({_show(current)})"
        elif change.kind == "renamed_key":
            fix = f"rename {change.old} to {change.new}{where}"
        else:
            fix = f"move {path} to {change.target}"
    return Finding(label, change.kind, message, fix, key=change.old)


def _nested(scope: str, parent: str, mapping: Mapping, label: str) -> list[Finding]:
    """Findings for old keys of ``scope`` (renamed in place) inside ``mapping``."""
    out = []
    for change in _changes(scope):
        if change.old in mapping:
            current = mapping.get(change.new) if change.new and change.new_scope == scope else None
            out.append(_finding(change, label, parent, mapping[change.old], current=current))
    return out


def _deployment_findings(config: Any) -> list[Finding]:
    out = []
    for path, label, dep in _deployments(config):
        out += _nested(DEPLOYMENT, path, dep, label)
        for scope in (AUTOSCALING, ACTOR):
            if isinstance(dep.get(scope), Mapping):
                out += _nested(scope, _join(path, scope), dep[scope], label)
    return out


def _top_findings(config: Mapping) -> list[Finding]:
    out = []
    http = config.get("http_options") if isinstance(config.get("http_options"), Mapping) else {}
    apps = [a for a in config["applications"] if isinstance(a, Mapping)]
    for change in _changes(TOP):
        if change.old not in config:
            continue
        value = config[change.old]
        if change.new_scope == HTTP:
            out.append(_finding(change, "config", "", value, current=http.get(change.new)))
            continue
        lacking = [i for i, a in enumerate(config["applications"]) if isinstance(a, Mapping) and change.new not in a]
        if not lacking:
            fix = f"delete the top-level {change.old}: every application sets its own"
        elif len(apps) == 1:
            fix = f"move {change.old} into the application: applications[{lacking[0]}].{change.new}"
        else:
            fix = f"move {change.old} into each application that needs it (applications[].{change.new})"
        out.append(_finding(change, "config", "", value, fix=fix))
    for change in _changes(HTTP):
        if change.old in http:
            current = config.get(change.new) if change.new_scope == TOP else None
            fix = (f"move http_options.{change.old} to the top level: {change.new}: {_show(http[change.old])}"
                   if change.new_scope == TOP and current is None else None)
            out.append(_finding(change, "config", "http_options", http[change.old], current=current, fix=fix))
    for i, app in enumerate(config["applications"]):
        if not isinstance(app, Mapping):
            continue
        for change in _changes(APP):
            if change.old in app:
                out.append(_finding(change, str(app.get("name", "default")), f"applications[{i}]", app[change.old],
                                    current=http.get(change.new)))
    return out


def _single_app_finding(config: Mapping) -> Finding:
    moved = [k for k in ("host", "port") if k in config]
    fix = ("wrap the application in a list: applications: [{name: " + str(config.get("name", "default"))
           + ", import_path: ..., deployments: [...]}] (route_prefix, runtime_env and args go with it)")
    if moved:
        fix += f", and move {' and '.join(moved)} to http_options"
    message = (f"import_path at the top level and no applications list: {SINGLE_APP_FORMAT.history}. "
               f"{SINGLE_APP_FORMAT.effect}")
    return Finding("config", SINGLE_APP_FORMAT.kind, message, fix)


def serve_key_findings(config: Any) -> list[Finding]:
    """A finding for each key of ``config`` that Ray 2.60 rejects or drops, naming the key that replaced it.

    ``config``: a ``serve build`` config (mapping with ``applications``), a single application, or a list
    of deployment dicts, as :func:`~scripts.capacity.spec.parse_serve_config` takes. Each finding's
    ``fix`` says what to do ("rename target_num_ongoing_requests_per_replica to target_ongoing_requests
    in applications[0].deployments[0].autoscaling_config").
    """
    out: list[Finding] = []
    if isinstance(config, Mapping):
        if isinstance(config.get("applications"), list):
            out += _top_findings(config)
        elif "import_path" in config:
            out.append(_single_app_finding(config))
    return out + _deployment_findings(config)


def check_serve_keys(config: Any) -> list[str]:
    """The printed findings of :func:`serve_key_findings`: empty when ``config`` has no old keys.

    Run it before ``serve deploy``: Ray 2.60 rejects some of these keys and silently ignores the others
    (the deployment then runs with a default instead of the value written).
    """
    return [f.format() for f in serve_key_findings(config)]


def deprecated_key_notes(config: Any) -> dict[str, tuple[str, ...]]:
    """Notes per deployment (by full name, ``app/name``) for autoscaling keys that are deprecated but honoured."""
    notes: dict[str, tuple[str, ...]] = {}
    for _, label, dep in _deployments(config):
        auto = dep.get("autoscaling_config")
        if not isinstance(auto, Mapping):
            continue
        found = tuple(f"autoscaling_config.{d.old} is deprecated in Ray 2.60 (still honoured): use {d.instead}"
                      for d in DEPRECATED_KEYS if d.old in auto)
        if found:
            notes[label] = found
    return notes


def _rename_in(mapping: dict, scope: str) -> None:
    for change in _changes(scope):
        if change.old in mapping:
            value = mapping.pop(change.old)
            if change.new is not None and change.new_scope == scope:
                mapping.setdefault(change.new, value)


def upgrade_serve_keys(config: Any) -> Any:
    """A copy of ``config`` with every old key under its current name (values map 1:1), removed keys deleted.

    A value already under the new key wins. A single-application config is wrapped in ``applications``;
    a top-level application key of a multi-application config moves into the one application lacking
    it (with several applications it is dropped, as Ray drops it). ``config`` itself is not changed.
    """
    config = copy.deepcopy(config)
    if isinstance(config, Mapping) and not isinstance(config.get("applications"), list) and "import_path" in config:
        app = {k: v for k, v in config.items() if k not in ("host", "port", "http_options", "proxy_location")}
        top = {k: config[k] for k in ("http_options", "proxy_location") if k in config}
        http = dict(top.get("http_options") or {})
        for key in ("host", "port"):
            if key in config:
                http.setdefault(key, config[key])
        if http:
            top["http_options"] = http
        config = {**top, "applications": [app]}
    if isinstance(config, dict) and isinstance(config.get("applications"), list):
        http = config.get("http_options")
        http = dict(http) if isinstance(http, Mapping) else {}
        apps = [a for a in config["applications"] if isinstance(a, dict)]
        for change in _changes(TOP):
            if change.old in config:
                value = config.pop(change.old)
                if change.new_scope == HTTP:
                    http.setdefault(change.new, value)
                elif len(apps) == 1:
                    apps[0].setdefault(change.new, value)
        for change in _changes(HTTP):
            if change.old in http:
                value = http.pop(change.old)
                if change.new_scope == TOP:
                    config.setdefault(change.new, value)
        for app in apps:
            for change in _changes(APP):
                if change.old in app:
                    http.setdefault(change.new, app.pop(change.old))
        if http or "http_options" in config:
            config["http_options"] = http
    for _, _, dep in _deployments(config):
        if isinstance(dep, dict):
            _rename_in(dep, DEPLOYMENT)
            for scope in (AUTOSCALING, ACTOR):
                if isinstance(dep.get(scope), dict):
                    _rename_in(dep[scope], scope)
    return config


def format_key_report(findings: list[Finding], notes: Mapping[str, tuple[str, ...]] | None = None) -> str:
    """The ``--keys-only`` report: each finding and note, then one Result line."""
    lines = ["Serve config keys (checked against Ray 2.60):"]
    for name, items in sorted((notes or {}).items()):
        lines.extend(f"  note: {name}: {n}" for n in items)
    for i, f in enumerate(findings, 1):
        lines.append(f"  {i}. " + f.format().replace("\n", "\n   "))
    if findings:
        lines.append(f"Result: FAIL ({len(findings)} Serve config key(s) that Ray 2.60 rejects or drops without "
                     "an error: fix them before serve deploy)")
    else:
        lines.append("Result: OK (no renamed, moved or removed Serve config keys)")
    return "\n".join(lines)
