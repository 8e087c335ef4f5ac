"""pr-comment.yml: after a PR run, each vendor's sticky comment, posted by this repository's
code from the run's artifacts read as data (`workflow_run`; docs/workflows.md, "The PR comment").
"""

from __future__ import annotations

from perf.ci import comment
from perf.ci.jobs import (
    CPU_ARTIFACT,
    DASHBOARD_VARIABLE,
    LATENCY_FINDINGS,
    PR_NUMBER_ARTIFACT,
    PR_NUMBER_FILE,
    PR_WORKFLOW,
    STATIC_FINDINGS,
    gpu_artifact,
)
from perf.ci.steps import HOSTED_RUNNER, TIMEOUT, VendorCI, uses

_RUN = "github.event.workflow_run"
_ARTIFACTS = "artifacts"  # under $RUNNER_TEMP: outside the workspace that holds this workflow's code
_FIND_PR = f"""\
# The number comes from the PR run's artifact, which a fork's code could have written: accept
# digits only, and only for the pull request whose head is the commit that run tested.
file="$RUNNER_TEMP/{_ARTIFACTS}/{PR_NUMBER_ARTIFACT}/{PR_NUMBER_FILE}"
if [ ! -f "$file" ]; then
  echo "::notice::the PR run left no {PR_NUMBER_ARTIFACT} artifact (its jobs were skipped); nothing to post"
  exit 0
fi
number="$(head -c 32 "$file" | tr -d '[:space:]')"
if ! [[ "$number" =~ ^[0-9]{{1,10}}$ ]]; then
  echo "::error::the {PR_NUMBER_ARTIFACT} artifact holds no pull request number"
  exit 1
fi
pr_head="$(gh api "repos/$REPO/pulls/$number" --jq .head.sha)"
if [ "$pr_head" != "$HEAD_SHA" ]; then
  echo "::notice::PR #$number is at $pr_head, not at the tested $HEAD_SHA (pushed since?); nothing posted"
  exit 0
fi
# The jobs' conclusions and failed steps, from GitHub rather than from the artifacts.
gh api "repos/$REPO/actions/runs/$RUN_ID/jobs?per_page=100" > "$RUNNER_TEMP/jobs.json"
echo "number=$number" >> "$GITHUB_OUTPUT"
"""


def _post_comment(vendor: str) -> dict:
    """Render `vendor`'s comment with this repository's code and create or edit it."""
    where = f"$RUNNER_TEMP/{_ARTIFACTS}"
    findings = " ".join(f'"{where}/{path}"' for path in (f"{CPU_ARTIFACT}/{STATIC_FINDINGS}",
                                                          f"{gpu_artifact(vendor)}/{LATENCY_FINDINGS}"))
    mine = (f'.[] | select(.user.login == "github-actions[bot]" and '
            f'(.body | startswith("{comment.marker(vendor)}"))) | .id')
    script = (
        "files=()\n"
        f"for f in {findings}; do\n"
        '  if [ -f "$f" ]; then files+=("$f"); fi\n'
        "done\n"
        f'body="$RUNNER_TEMP/comment-{vendor}.md"\n'
        f'python3 -m perf.ci.comment "${{files[@]}}" --vendor {vendor} --run-url "$RUN_URL" \\\n'
        '  --jobs "$RUNNER_TEMP/jobs.json" --commit "$HEAD_SHA" --out "$body" \\\n'
        '  --dashboard-url "$DASHBOARD_URL" --repo "$REPO"\n'
        "# One comment per vendor, found again by the marker on its first line.\n"
        f'ids="$(gh api --paginate "repos/$REPO/issues/$NUMBER/comments" --jq \'{mine}\')"\n'
        'id="${ids%%[!0-9]*}"\n'
        'if [ -n "$id" ]; then\n'
        '  gh api --method PATCH "repos/$REPO/issues/comments/$id" -F "body=@$body" --silent\n'
        "else\n"
        '  gh api --method POST "repos/$REPO/issues/$NUMBER/comments" -F "body=@$body" --silent\n'
        "fi\n"
    )
    return {"name": f"Post or edit the {vendor} comment", "if": "steps.pr.outputs.number != ''",
            "env": {"NUMBER": "${{ steps.pr.outputs.number }}"}, "run": script}


def build_pr_comment(vendors: list[VendorCI]) -> dict:
    """The workflow that comments on a PR after its run: `workflow_run`, never the PR's code.

    It runs in this repository's context with a token that may write pull-request comments,
    so it checks out the default branch (this code), downloads the PR run's artifacts outside
    the workspace, and reads them only as data (docs/workflows.md, "The PR comment").
    """
    finished = f"({_RUN}.conclusion == 'success' || {_RUN}.conclusion == 'failure')"
    return {
        "name": "PR comment",
        "on": {"workflow_run": {"workflows": [PR_WORKFLOW], "types": ["completed"]}},
        "permissions": {},
        "jobs": {"comment": {
            "name": "Post the perf-gate comment of each vendor",
            # A cancelled run was superseded by a newer push, whose run will comment.
            "if": f"{_RUN}.event == 'pull_request' && {finished}",
            "runs-on": HOSTED_RUNNER,
            "timeout-minutes": TIMEOUT["comment"],
            "permissions": {"actions": "read", "contents": "read", "pull-requests": "write"},
            # One at a time per PR branch, so two runs never both create the comment.
            "concurrency": {"group": (f"pr-comment-${{{{ {_RUN}.head_repository.full_name }}}}-"
                                      f"${{{{ {_RUN}.head_branch }}}}"), "cancel-in-progress": False},
            "env": {"GH_TOKEN": "${{ github.token }}", "REPO": "${{ github.repository }}",
                    "RUN_ID": f"${{{{ {_RUN}.id }}}}", "RUN_URL": f"${{{{ {_RUN}.html_url }}}}",
                    "HEAD_SHA": f"${{{{ {_RUN}.head_sha }}}}",
                    # The nightly dashboard the comment links: a repository variable where the site is
                    # not at GitHub Pages' default https://<owner>.github.io/<repo>/ (empty: that default).
                    "DASHBOARD_URL": f"${{{{ vars.{DASHBOARD_VARIABLE} }}}}"},
            "steps": [
                # The default branch: a workflow_run's ref; the PR's commits are never fetched.
                uses("checkout", "Check out the default branch (the renderer; never the PR's code)",
                     persist_credentials=False),
                uses("download-artifact", "Download the PR run's artifacts (data only)",
                     run_id=f"${{{{ {_RUN}.id }}}}", github_token="${{ github.token }}", pattern="pr-*",
                     path=f"${{{{ runner.temp }}}}/{_ARTIFACTS}"),
                {"id": "pr", "name": "Find the pull request the run tested", "run": _FIND_PR},
                *[_post_comment(v.vendor) for v in vendors],
            ],
        }},
    }
