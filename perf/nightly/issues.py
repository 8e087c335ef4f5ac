"""A confirmed nightly regression becomes a GitHub issue, or a comment on the open one.

`python -m perf alert --confirm` (perf/nightly/confirm.py) renders, per machine and flagged
commit, the cases its re-measure confirmed into `<out>/issues/issues.json` and one Markdown
body per group; the nightly workflow's issues job posts them:

    python3 -m perf.nightly.issues post --results results/nightly [--site .asv/html/nightly]
                                        [--repo OWNER/NAME] [--dry-run]

Each group is one cause (a flagged commit on its machine) and one issue: posted through the
issue tracker (perf.ci.github.tracker) under a key hidden in its body, so the job run again
(interrupted, retried) or a later night's news about the same cause updates the issue and never
opens a second one. Each case also carries a marker, `<!-- perf-alert VENDOR MACHINE VARIANT
SCENARIO METRIC -->`, like the sticky PR comment's (perf/ci/comment.py), for a person searching
the issues. The issue's URL goes into alert.json, and the dashboard's alert tables link it
(perf/nightly/site.py relink).

The body: the cases with the nightly's ratio and the re-measure's ratio and interval, the
history plot of each (a link to the dashboard's PNG, and the image: issues cannot take
uploads through the API), the commit range last good..flagged (a compare URL), and the
bisect command of each case. Posting goes through `gh api` (perf/ci/github.py), the
mechanism of the PR comment, or with `--dry-run DIR` into a folder of JSON files. The causes
perf/nightly/attribute.py kept in `<results>/issues/attributed/` (the GPU runner has no token)
are posted too, by their keys. Stdlib only (the issues job runs on a bare hosted runner).

A code cause whose bisect found the first bad commit mentions that commit's author
(`commit_author`): the GitHub account through `gh api`, else git's name and email. Where the
runner that attributed it had no token, the issues job, which has one, puts the account in
when it posts (`with_login`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

from perf import files, verdicts, why
from perf.ci.comment import code
from perf.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, ConfigError

ISSUES_DIR = "issues"
PLAN = "issues.json"
PLAN_VERSION = 1
DRY_RUN_DIR = "dry-run"  # previews of `--confirm --dry-run`: never in the plan, never posted
# The attributed causes of the night (perf/nightly/attribute.py --dry-run <results>/issues/attributed
# on the GPU runner, which has no token): the issues job replays them into GitHub.
ATTRIBUTED_DIR = "attributed"
TITLE_CHARS = 200  # GitHub allows 256
LABELS = ("performance", "nightly")
MARKER = "<!-- perf-alert {vendor} {machine} {variant} {scenario} {metric} -->"
# The author line of a code cause's issue; the hidden sha lets the issues job put the account in.
AUTHOR_LINE = "Author of the first bad commit: {who} <!-- perf-author: {sha} -->"
_AUTHOR = re.compile(r"^Author of the first bad commit: (.+) <!-- perf-author: ([0-9a-f]{7,40}) -->$", re.M)


def _word(text: str) -> str:
    """One word of a marker: no spaces, and nothing that could end the HTML comment."""
    return re.sub(r"\s+|--+|>", "_", str(text)) or "_"


def marker(vendor: str, machine: str, variant: str, scenario: str, metric: str) -> str:
    return MARKER.format(vendor=_word(vendor), machine=_word(machine), variant=_word(variant),
                         scenario=_word(scenario), metric=_word(metric))


@dataclass(frozen=True)
class Context:
    """Where the links point: the repository (owner/name), the dashboard's root, this run."""

    repo: str = ""
    dashboard: str = ""
    run_url: str = ""


def bisect_command(good: str, bad: str, variant: str, scenario: str, metric: str) -> str:
    """The command that finds the commit of good..bad that made the case slower (`perf bisect`)."""
    import shlex

    return shlex.join(["python", "-m", "perf", "bisect", good, bad, "--scenario", scenario,
                       "--variant", variant, "--metric", metric])


# --- the plan: what confirm found, as data --------------------------------------------------


def items_for(result: dict, context: Context, dry_run: bool = False) -> list[dict]:
    """One item per (flagged commit, last good commit) of machine `result` (alert.machine_result,
    each alert with its `remeasure`): its confirmed cases; with `dry_run`, also those a re-measure
    would decide (pending), to preview the body they would get."""
    from perf.ci.jobs import dashboard_link
    from perf.nightly.selection import slug
    from perf.nightly.site import case_png

    wanted = {verdicts.CONFIRMED} | ({verdicts.PENDING} if dry_run else set())
    groups: dict[tuple[str, str], list[dict]] = {}
    for a in result["alerts"]:
        r = a.get("remeasure") or {}
        if r.get("status") not in wanted or not r.get("base"):
            continue
        groups.setdefault((r["head"], r["base"]), []).append(a)
    items = []
    page = dashboard_link(context.dashboard, result["vendor"], slug(result["machine"]), "index.html")
    for (head, base), alerts in groups.items():
        cases = []
        for a in alerts:
            png = case_png(a["variant"], a["scenario"], a["metric"])
            cases.append({
                "variant": a["variant"], "scenario": a["scenario"], "metric": a["metric"],
                "marker": marker(result["vendor"], result["machine"], *_case(a)),
                "nightly": {k: a.get(k) for k in ("ratio", "ci_low", "ci_high", "p_value", "base", "head",
                                                  "threshold", "note")},
                "remeasure": a["remeasure"],
                "plot": dashboard_link(context.dashboard, result["vendor"], slug(result["machine"]), png),
                "plot_file": png,
            })
        gate_out = alerts[0]["remeasure"].get("out", "")
        whys = [why.case_section(gate_out, c["variant"], c["scenario"]) if gate_out else None for c in cases]
        items.append({
            "machine": result["machine"], "vendor": result["vendor"], "gpu": result["gpu"],
            "head": head, "base": base, "repo": context.repo, "page": page, "run_url": context.run_url,
            "gate_command": alerts[0]["remeasure"].get("command", ""), "gate_out": gate_out,
            "commits": len(result.get("commits") or []), "cases": cases,
            "why": [w for w in dict.fromkeys(whys) if w],  # the re-measure's why.json (perf/why.py)
        })
        items[-1]["key"] = item_key(items[-1])
    return items


def write_items(folder: str, items: list[dict], dry_run: bool = False) -> list[str]:
    """Each item's body as Markdown (the new-issue form) and, unless a dry run, the plan the
    issues job posts; the paths of the bodies."""
    target = os.path.join(folder, DRY_RUN_DIR) if dry_run else folder
    paths = []
    for item in items:
        title, body = render(item)
        name = f"{_file_part(item['machine'])}-{item['head'][:8]}-vs-{item['base'][:8]}.md"
        path = files.write_text(os.path.join(target, name), f"<!-- title: {title} -->\n{body}")
        item["body_file"] = os.path.basename(path)
        item["title"] = title
        paths.append(path)
    plan = os.path.join(folder, PLAN)
    if not dry_run and items:
        files.write_json(plan, {"version": PLAN_VERSION, "items": items})
    elif not dry_run and os.path.exists(plan):
        os.remove(plan)  # an earlier run's: nothing is confirmed now, so nothing may be posted
    return paths


def _case(a: dict) -> tuple[str, str, str]:
    return a["variant"], a["scenario"], a["metric"]


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "machine"


# --- rendering ------------------------------------------------------------------------------


def _ratio(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "–"


def _interval(lo, hi) -> str:
    return f"[{lo:.3f}, {hi:.3f}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "–"


def title_of(item: dict, cases: list[dict]) -> str:
    gpu, head = item["gpu"], item["head"][:8]
    if len(cases) == 1:
        c = cases[0]
        ratio = c["remeasure"].get("ratio") or c["nightly"].get("ratio")
        text = (f"Perf regression: {c['variant']} {c['metric']} x{ratio:.2f} on {c['scenario']} ({gpu}) "
                f"at {head}")
    else:
        variants = ", ".join(dict.fromkeys(c["variant"] for c in cases))
        text = f"Perf regression on {gpu} at {head}: {len(cases)} cases ({variants})"
    return text[:TITLE_CHARS]


def render(item: dict) -> tuple[str, str]:
    """(title, body) of the issue of `item`."""
    cases = item["cases"]
    good, bad = item["base"], item["head"]
    confirmed = all(c["remeasure"].get("status") == verdicts.CONFIRMED for c in cases)
    lines = [*(c["marker"] for c in cases)]
    lines += [f"## Performance regression on {code(item['gpu'])} (machine {code(item['machine'])})", ""]
    if confirmed:
        lines.append(f"The nightly flagged commit {code(bad[:10])} and the latency gate's same-process A/B "
                     f"against the last good commit {code(good[:10])} confirmed it: {len(cases)} case"
                     f"{'s' if len(cases) != 1 else ''}.")
    else:
        lines.append(f"**Preview (`--dry-run`): not re-measured yet.** The nightly flagged commit "
                     f"{code(bad[:10])}; the issue is opened only if the re-measure against "
                     f"{code(good[:10])} fails it too.")
    compare = f"https://github.com/{item['repo']}/compare/{good}...{bad}" if item.get("repo") else ""
    span = f"{good[:10]}..{bad[:10]}"
    rng = f"[{code(span)}]({compare})" if compare else code(span)
    lines += ["", f"**Commits** (last good..flagged): {rng} — `git log --oneline {span}`", "",
              "| variant | scenario | metric | nightly ratio | p | re-measure ratio | interval | "
              "smallest detectable | history |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        n, r = c["nightly"], c["remeasure"]
        p = f"{n['p_value']:.1e}" if isinstance(n.get("p_value"), (int, float)) else "–"
        plot = f"[plot]({c['plot']})" if c.get("plot") else code(c["plot_file"], 120)
        if r.get("status") == verdicts.CONFIRMED:
            again_cells = (_ratio(r.get("ratio")), _interval(r.get("ci_low"), r.get("ci_high")),
                           _ratio(r.get("min_detectable")))
        else:
            again_cells = ("not yet", "–", "–")
        lines.append("| " + " | ".join((code(c["variant"]), code(c["scenario"]), code(c["metric"]),
                                          _ratio(n.get("ratio")), p, *again_cells, plot)) + " |")
    plots = [c for c in cases if c.get("plot")]
    if plots:
        lines += ["", "### History", ""]
        lines += [f"![{c['variant']} {c['metric']} on {c['scenario']}]({c['plot']})" for c in plots]
        lines += ["", "<sub>The dashboard shows the newest night: the plot changes as the history goes on "
                  "(this night's site is the run's `site-" + item["vendor"] + "` artifact).</sub>"]
    if item.get("why"):
        lines += ["", "### Why slower", "", *item["why"]]
    lines += ["", "### Bisect", "", "```"]
    lines += [bisect_command(good, bad, c["variant"], c["scenario"], c["metric"]) for c in cases]
    lines += ["```", "", "### How this was measured", "",
              f"- nightly: the flagged commit's repeat medians against those of the commits before it "
              f"(docs/nightly.md, \"The change-point alert\"); note: "
              f"{code(cases[0]['nightly'].get('note') or '', 160)}",
              f"- re-measure: both commits' kernels in the same fresh processes, on the same tensors: "
              f"{code(item.get('gate_command') or '', 400)}"]
    links = [f"[dashboard]({item['page']})" if item.get("page") else "",
             f"[nightly run]({item['run_url']}) (artifacts: the gate's report under "
             f"{code(item.get('gate_out') or '')})" if item.get("run_url") else ""]
    links = [x for x in links if x]
    if links:
        lines += ["", " · ".join(links)]
    lines += ["", "<sub>ratio = flagged / last good (> 1: slower); interval: the gate's bootstrap confidence "
              "interval; smallest detectable: the smallest ratio the gate tells from this case's noise. "
              "Opened by the nightly workflow, and updated when it learns more about this cause."
              "</sub>"]
    return title_of(item, cases), "\n".join(lines) + "\n"


# --- posting --------------------------------------------------------------------------------


def load_plan(results: str) -> list[dict]:
    path = os.path.join(results, ISSUES_DIR, PLAN)
    if not os.path.exists(path):
        raise ConfigError(f"{path}: not found; `python -m perf alert --confirm` writes it when a "
                          f"re-measure confirms an alert")
    doc = files.load_json(path, "the issues plan", "run `python -m perf alert --confirm` again")
    items = doc.get("items")
    if doc.get("version") != PLAN_VERSION or not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("cases"), list) and i.get("head") and i.get("base")
            for i in items):
        raise ConfigError(f"{path}: not an issues plan of version {PLAN_VERSION} (items with head, base and "
                          f"cases); run `python -m perf alert --confirm` again")
    return items


def item_key(item: dict) -> str:
    """The issue key of a confirmed regression: the flagged commit on its machine (one cause,
    one issue; a later bisect or a second confirmation updates it)."""
    return f"code/{_word(item['vendor'])}/{_word(item['machine'])}/{item['head'][:12]}"


def post(results: str, tracker, site_dir: str | None = None, log=print) -> list[dict]:
    """Open or update one issue per planned item on `tracker` (perf.ci.github.tracker); record each
    case's issue in alert.json (and the dashboard under `site_dir`); the actions taken."""
    attributed = os.path.join(results, ISSUES_DIR, ATTRIBUTED_DIR)
    plan = os.path.join(results, ISSUES_DIR, PLAN)
    items = load_plan(results) if os.path.exists(plan) or not os.path.isdir(attributed) else []
    actions = []
    for item in items:
        key = item.get("key") or item_key(item)
        before = tracker.open_keys()
        title, body = render(item)
        number = tracker.upsert(key, title, body, labels=LABELS)
        action = "updated" if key in before else "opened"
        url = tracker.url(number)
        log(f"{action}: issue #{number} ({len(item['cases'])} case(s)) {title} {url}")
        actions.append({"action": action, "number": number, "url": url, "key": key,
                        "machine": item["machine"], "cases": item["cases"]})
    if items:
        _record(results, actions, site_dir)
    if os.path.isdir(attributed):
        actions += replay_attributed(attributed, tracker, log)
    return actions


def replay_attributed(folder: str, tracker, log=print) -> list[dict]:
    """The issues attribution kept in `folder` (perf.ci.github's folder tracker), posted to
    `tracker`: each open one upserted by its key (its author's account put in where `tracker`
    is GitHub's, `with_login`), each closed one closed with its last comment."""
    from perf.ci.github import FolderTracker

    api = getattr(tracker, "api", None)
    actions = []
    for issue in FolderTracker(folder).issues():
        before = tracker.open_keys()
        if issue["state"] == "open":
            body = with_login(issue["body"], api) if api is not None else issue["body"]
            number = tracker.upsert(issue["key"], issue["title"], body, tuple(issue["labels"]))
            action = "updated" if issue["key"] in before else "opened"
        else:
            tracker.close(issue["key"], (issue["comments"] or [""])[-1])
            number, action = None, "closed" if issue["key"] in before else "closed already"
        log(f"{action}: {issue['key']} {issue['title']}")
        actions.append({"action": action, "number": number, "key": issue["key"], "cases": []})
    return actions


def commit_author(sha: str, root: str, repo: str | None = None, gh: str = "gh") -> dict | None:
    """Who wrote commit `sha`: {"sha", "login"} from `gh api` on `repo` (OWNER/NAME) and
    {"name", "email"} from git in the checkout `root`, what each could say; None when neither
    could. Never raises: a mention is not worth a failed nightly."""
    from perf import git
    from perf.ci.github import REPO, GhApi

    who: dict = {}
    try:
        login = GhApi(repo, gh).commit_login(sha) if repo and REPO.fullmatch(repo) else None
        if login:
            who["login"] = login
        named = git.commit_author(root, sha)
        if named:
            who["name"], who["email"] = named
    except Exception:  # noqa: BLE001 - whatever broke, the issue goes out without the mention
        pass
    return {"sha": sha, **who} if who else None


def mention(author: dict) -> str:
    """@login where GitHub knows the account (it notifies them), else "name <email>"."""
    if author.get("login"):
        return f"@{author['login']}"
    name, email = author.get("name") or "", author.get("email") or ""
    return f"{name} <{email}>" if name and email else name or email or author.get("sha", "")[:10]


def with_login(body: str, api) -> str:
    """`body` with each author line that names no account yet naming the one `api` (perf.ci.github's
    GhApi) finds for its commit; unchanged where it finds none."""
    def upgrade(m: re.Match) -> str:
        if m.group(1).startswith("@"):
            return m.group(0)
        login = api.commit_login(m.group(2))
        return AUTHOR_LINE.format(who=f"@{login}", sha=m.group(2)) if login else m.group(0)
    return _AUTHOR.sub(upgrade, body)


def _record(results: str, actions: list[dict], site_dir: str | None) -> None:
    """Each case's issue into alert.json (written by the same run's confirm), and the dashboard."""
    path = os.path.join(results, "alert.json")
    doc = files.load_json(path, "alert.json, to record the issues in", "pass --results, the folder "
                          "`perf alert --confirm` wrote")
    if not isinstance(doc.get("machines", []), list) or not all(
            isinstance(m, dict) and isinstance(m.get("alerts", []), list) for m in doc.get("machines", [])):
        raise ConfigError(f"{path}: `machines` is not a list of machines with their alerts; pass --results, "
                          f"the "
                          f"folder `perf alert --confirm` wrote")
    found = {(a["machine"], c["variant"], c["scenario"], c["metric"]): a for a in actions for c in a["cases"]}
    for m in doc.get("machines", []):
        for a in m.get("alerts", []):
            act = found.get((m["machine"], a["variant"], a["scenario"], a["metric"]))
            if act is not None:
                a["issue"] = {"url": act["url"], "number": act["number"], "action": act["action"]}
    files.write_json(path, doc)
    if site_dir:
        from perf.nightly import site

        site.relink(site_dir, {m["machine"]: m for m in doc.get("machines", [])})
        files.write_json(os.path.join(site_dir, "alert.json"), doc)


# --- command line ---------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("post",), help="post: open or comment on the planned issues")
    parser.add_argument("--results", default=os.path.join("results", "nightly"),
                        help="the --out of `perf alert --confirm`: alert.json and issues/ "
                             "(default: results/nightly)")
    parser.add_argument("--site", default=None,
                        help="the report's folder (<html_dir>/nightly), whose alert tables get the links")
    parser.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY", ""),
                        help="OWNER/NAME (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--dry-run", default=None, metavar="DIR",
                        help="post nothing to GitHub: keep the issues as JSON files in DIR (one per issue)")


def main(args: argparse.Namespace, tracker=None) -> int:
    from perf.ci import github

    try:
        if args.site and not os.path.isdir(args.site):
            raise ConfigError(f"--site {args.site}: no such folder; pass the report's folder "
                              f"(<html_dir>/nightly)")
        post(args.results, tracker or github.tracker(args.repo, args.dry_run), args.site)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except github.ApiError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.nightly.issues",
                                     description=__doc__.splitlines()[0])
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    from perf.cli import command

    command("issues")


# --- attributed causes (perf/nightly/attribute.py): one issue per cause ---------------------------


def cause_key(record: dict, runner: str, vendor: str) -> str:
    """The issue key of an attributed cause: what the cause is, so that every runner and night
    that sees it updates one issue. Code: the first bad commit (else the range left); toolchain:
    the versions; creep: the variants that crept; environment: the runner and what changed in its
    fingerprint (a driver step found a night late on one scenario updates the driver's issue), else
    the night of the step (each machine's own)."""
    cause, ev = record["cause"], record.get("evidence") or {}
    if cause == verdicts.CODE:
        b = record.get("bisect") or {}
        what = (b.get("first_bad") or "")[:12] or f"{ev.get('good', '')[:12]}..{ev.get('bad', '')[:12]}"
        return f"code/{_word(vendor)}/{what}"
    if cause == verdicts.TOOLCHAIN:
        from perf.fingerprint import TOOLCHAIN_FIELDS

        return f"toolchain/{_word(vendor)}/{_changes(ev, TOOLCHAIN_FIELDS) or record['night']}"
    if cause == verdicts.CREEP:  # one open issue per creeping variant: a later night's creep updates it
        variants = sorted({k.split("|")[0] for k in record["keys"]})
        return f"creep/{_word(vendor)}/{'+'.join(_word(v) for v in variants)}"
    if cause == verdicts.ENVIRONMENT:
        from perf.fingerprint import ENVIRONMENT_FIELDS

        return f"environment/{_word(runner)}/{_changes(ev, ENVIRONMENT_FIELDS) or record['night']}"
    return f"{cause}/{_word(runner)}/{record['night']}"


def _changes(evidence: dict, fields: tuple[str, ...]) -> str:
    """The evidence's fingerprint changes among `fields` as one key part: field-OLD-NEW/..."""
    fp = evidence.get("fingerprint") or {}
    return "/".join(f"{f}-{_word(fp[f][0])}-{_word(fp[f][1])}" for f in fields if f in fp)


def render_cause(record: dict, runner: str, gpu: str) -> tuple[str, str]:
    """(title, body) of a cause's issue: the cause, why, the cases with their ratios, and the
    evidence (fingerprint diff, libraries beside us, the A/Bs, the bisect's answer or the range
    left, the commits of a creep's span)."""
    cause, ev = record["cause"], record.get("evidence") or {}
    ratios = record.get("ratios") or {}
    worst = max(ratios.values(), default=1.0)
    cases = len(record["keys"])
    b = record.get("bisect") or {}
    changed = ", ".join(f"{f} {o} -> {n}" for f, (o, n) in (ev.get("fingerprint") or {}).items())
    what = {verdicts.CODE: f"commit {(b.get('first_bad') or ev.get('bad', ''))[:10]}",
            verdicts.TOOLCHAIN: changed, verdicts.ENVIRONMENT: changed or "the machine moved",
            verdicts.CREEP: f"{len(ev.get('nights') or [])} nights since {ev.get('start')}"}.get(cause, "")
    title = f"Nightly {cause}: x{worst:.3f} on {cases} series ({gpu}, {runner}) — {what}"[:TITLE_CHARS]
    lines = [f"## {cause}: {record['why']}", "",
             f"Runner {code(runner)} ({code(gpu)}): the step appeared on the night of {record['night']}"
             f" and was attributed on {record.get('decided', record['night'])}.", "",
             "| series | ratio |", "|---|---|"]
    lines += [f"| {code(k.replace('|', ' '))} | {_ratio(r)} |" for k, r in sorted(ratios.items())]
    if ev.get("fingerprint"):
        lines += ["", "### What changed between the nights", "", "| field | before | after |",
                  "|---|---|---|"]
        lines += [f"| {f} | {code(str(o))} | {code(str(n))} |" for f, (o, n) in ev["fingerprint"].items()]
    libs = ev.get("libraries") or {}
    if libs:
        lines += ["", f"**Vendor libraries beside us** (same scenarios, same nights): ours "
                      f"x{_ratio(libs.get('ours'))}, the libraries' x{_ratio(libs.get('libraries'))}"
                      + (" — they moved with us" if libs.get("moved") else "")]
    for name, label in (("toolchain_ab", "Toolchain A/B (one commit, old and new toolchain)"),
                        ("remeasure", "Same-process A/B (last good and flagged commit)")):
        if ev.get(name):
            lines += ["", f"### {label}", "", "| series | status | ratio |", "|---|---|---|"]
            lines += [f"| {code(k.replace('|', ' '))} | {r.get('status')} | {_ratio(r.get('ratio'))} |"
                      for k, r in sorted(ev[name].items())]
    if cause == verdicts.CODE:
        lines += ["", "### Bisect", ""]
        if b.get("first_bad"):
            lines.append(f"First bad commit: {code(b['first_bad'])} ({b.get('runs')} gate runs).")
            if b.get("author"):
                lines += ["", AUTHOR_LINE.format(who=mention(b["author"]), sha=b["first_bad"])]
        else:
            left = b.get("candidates") or []
            lines.append(f"Not narrowed to one commit within the budget ({b.get('runs')} gate runs): "
                         f"{len(left)} left, {code(left[0][:10] if left else ev.get('good', '')[:10])}.."
                         f"{code((left[-1] if left else ev.get('bad', ''))[:10])}.")
        case = record["keys"][0].split("|")
        lines += ["", "```", bisect_command(ev.get("good", ""), ev.get("bad", ""), *case), "```"]
    if cause == verdicts.CREEP:
        commits = ev.get("commits") or []
        lines += ["", f"### Commits in the span ({len(commits)})", ""]
        lines += [f"- {code(c[:10])}" for c in commits[:50]] + (["- ..."] if len(commits) > 50 else [])
    lines += ["", "<sub>Attributed by the nightly (docs/nightly.md, \"Attribution\"); updated, never "
              "duplicated, while the cause is open.</sub>"]
    return title, "\n".join(lines) + "\n"
