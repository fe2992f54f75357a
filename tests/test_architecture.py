"""The package layout holds (docs/architecture.md): layers without cycles, checked by
import-linter against pyproject's contracts; one package decides where files live; tuner
reads no test switch from the environment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tuner"


def _sources() -> dict[str, str]:
    return {path.relative_to(REPO).as_posix(): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_layers_and_acyclic_contracts_hold():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint_imports)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout, done.stdout[-2000:]


# "Is it a URI?" asked or answered by hand: a "://" test, a URI built from a filesystem's
# scheme, a check for pyarrow's local filesystem. (MLflow's and the dashboard's own
# addresses, sqlite:/// and http://, are not sweep folders.)
ASKS_WHERE = re.compile(r"""is_uri|["']://["']|\}://|LocalFileSystem""")


def test_only_the_folder_package_asks_whether_a_place_is_a_uri():
    asked = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _sources().items()
        for number, line in enumerate(text.splitlines(), start=1)
        if ASKS_WHERE.search(line) and not name.startswith("tuner/folder/")
    ]
    assert asked == []
    inside = "".join(text for name, text in _sources().items() if name.startswith("tuner/folder/"))
    assert ASKS_WHERE.search(inside), "the check's patterns no longer match how folder/ asks"


def test_tuner_reads_no_test_switch_from_the_environment():
    assert [name for name, text in _sources().items() if "TUNER_TEST" in text] == []


def test_every_package_says_what_it_holds():
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert packages == [
        "cli",
        "cluster",
        "data",
        "driver",
        "folder",
        "integrations",
        "models",
        "results",
        "search",
        "serving",
        "sweepfile",
        "tracking",
        "trial",
        "usercode",
    ]
    for name in packages:
        doc = (PACKAGE / name / "__init__.py").read_text()
        assert doc.startswith('"""') and len(doc) > 60, name


def test_no_module_outside_search_names_a_scheduler_or_searcher():
    """A method's rules live in its module in tuner/search/; the rest of tuner asks its traits
    (``pauses_trials``, ``legend``, ...), never its name: adding one touches search/ alone."""
    from tuner.search import registry

    names = "|".join(sorted({*registry.SCHEDULERS, *registry.SEARCHERS}))
    # a quoted name ("asha"), or a name compared with one (scheduler.name == / in / !=)
    quoted = re.compile(rf"""["']({"|".join(registry.SCHEDULERS)}|optuna|hyperopt)["']""")
    compared = re.compile(rf"""(searcher|scheduler)\.name\s*(==|!=|in\b|not in\b)|["']({names})["']\s*(==|!=)""")
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _sources().items()
        if not name.startswith("tuner/search/")
        for number, line in enumerate(text.splitlines(), start=1)
        if quoted.search(line) or compared.search(line)
    ]
    assert found == []
    inside = "".join(text for name, text in _sources().items() if name.startswith("tuner/search/"))
    assert quoted.search(inside) and compared.search(inside), "the patterns no longer match how search/ names them"


def test_test_modules_have_unique_names():
    # The tests folders hold no __init__.py, so pytest imports each module by its bare
    # name: two test_x.py in different folders stop the whole run at collection.
    names = [path.name for path in sorted((REPO / "tests").rglob("test_*.py"))]
    assert sorted({name for name in names if names.count(name) > 1}) == []
