"""The claims ledger: every experiment declares its paper's claims; every criterion gives "not" on each of its
mutations of the committed dataset (and "reproduced" on its `passes` datasets); a claim our data do not reproduce shows
that its criterion can pass; the site's status tables are the ledger's, rendered now; no status word is typed."""
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from diffgeo import claims, papers, site
from diffgeo.scaffold import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
EXPS = site.experiments()
CLAIMS = [c for e in EXPS for c in e.claims.values()]
sys.path.insert(0, str(ROOT / "scripts"))
store_claims = importlib.import_module("store_claims")


def _main(exp):
    "The experiment's main committed cpu dataset."
    return claims.committed(exp, ROOT)["cpu"]


def _derived(exp, ds):
    return exp.derived(ds)


def test_every_experiment_declares_claims():
    bare = [e.name for e in EXPS if not e.claims]
    assert not bare, f"experiments without claims: {bare}; declare their paper's claims with @EXPERIMENT.claim"


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_is_declared_in_full(claim):
    for f in ("where", "words", "statistic", "reproduced", "partly"):
        assert getattr(claim, f).strip(), f"{claim.id}: empty {f}"
    assert re.search(r"Fig\.|Table|Eq\.|§|App\.|Prop\.|Theorem|Sec\.", claim.where), f"{claim.id}: where = {claim.where!r}"


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_evaluates_on_every_committed_dataset(claim):
    for label, ds in claims.committed(claim.experiment, ROOT).items():
        v = claims.evaluate(claim, ds)
        assert v.status in claims.STATUSES, (label, v)
        if v.status != "not run": assert v.value, f"{claim.id} on {label}: a verdict without our value"


def _speaking(claim):
    "The committed datasets (label -> dataset) on which the claim has a verdict (not 'not run')."
    return {l: ds for l, ds in claims.committed(claim.experiment, ROOT).items() if claims.evaluate(claim, ds).status != "not run"}


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_fails_on_its_mutations(claim):
    """Each mutation (derived again) of every committed dataset on which the claim holds, reproduced or partly, makes the
    criterion say 'not'; each `passes` dataset says 'reproduced'. Where no committed dataset holds, the mutations are
    tested on the `passes` datasets instead, so that a claim our data do not reproduce has its mutations tested too."""
    exp, sets = REGISTRY[claim.experiment], _speaking(claim)
    if not sets: pytest.skip("no committed dataset speaks to this claim")
    holds, passed = {l: ds for l, ds in sets.items() if claims.evaluate(claim, ds).status in ("reproduced", "partly")}, {}
    for label, ds in sets.items():
        for name, make in claim.passes.items():
            passed[f"{label}, {name}"] = p = _derived(exp, make(ds))
            v = claim(p)
            assert v.status == "reproduced", f"{claim.id} on {label}: {v.status!r} on {name!r}, which should pass ({v.value}; {v.note})"
    holds = holds or passed
    assert holds, f"{claim.id}: no committed dataset on which it holds, and no passes dataset to test its mutations on"
    for label, ds in holds.items():
        for name, mutate in claim.mutations.items():
            v = claim(_derived(exp, mutate(ds)))
            assert v.status == "not", f"{claim.id} on {label}: {v.status!r} on the mutation {name!r} ({v.value}; {v.note})"


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_a_claim_not_reproduced_can_pass(claim):
    "A criterion that says 'not' on a committed dataset names a dataset on which it says 'reproduced': 'not' is the data's verdict."
    if any(claims.evaluate(claim, ds).status == "not" for ds in claims.committed(claim.experiment, ROOT).values()):
        assert claim.passes, f"{claim.id} is not reproduced: declare passes={{...}}, a dataset on which its criterion passes"


@pytest.mark.parametrize("exp", [e for e in EXPS if e.derives], ids=lambda e: e.name)
def test_deriving_again_changes_no_verdict(exp):
    "The mutation tests derive the mutated dataset again; on the unmutated one that changes no verdict."
    ds = _main(exp)
    again = _derived(exp, ds.copy())
    for c in exp.claims.values():
        assert c(again) == c(ds), c.id


def _show_cells():
    for path in sorted(NBS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code" and store_claims.show_call("".join(cell["source"])) is not None:
                yield path, i


def test_pages_show_the_ledger():
    "Each paper page, each experiment notebook with claims, and the landing page (the README) show a ledger table."
    have = {p.stem for p, _ in _show_cells()}
    want = {"index", *(f"paper_{k}" for k in papers.PAPERS),
            *(e.notebook.removesuffix(".ipynb") for e in EXPS if e.claims)}
    assert not want - have, f"no claims.show(...) cell in {sorted(want - have)}"


def test_stored_tables_are_current():
    stale = store_claims.main(["--check"])
    assert stale == 0, "a stored ledger table is stale: run python scripts/store_claims.py, then nbdev-clean"


STATUS_WORDS = re.compile(r"\*\*(reproduced|partly|not reproduced|not at cpu scale|not run)\b", re.I)


def test_no_status_word_is_typed_on_the_pages():
    for page in ["index", "gallery", *(f"paper_{k}" for k in papers.PAPERS)]:
        nb = json.loads((NBS / f"{page}.ipynb").read_text())
        typed = [m.group(0) for c in nb["cells"] if c["cell_type"] == "markdown" for m in STATUS_WORDS.finditer("".join(c["source"]))]
        assert not typed, f"{page}.ipynb types status words {typed}: render them from the ledger (claims.show)"


def _all_nan(ds):
    "Every floating data variable of `ds` NaN: a run whose every measurement failed."
    ds = ds.copy()
    for v in ds.data_vars:
        if ds[v].dtype.kind == "f": ds[v] = ds[v] * float("nan")
    return ds


@pytest.mark.parametrize("exp", [e for e in EXPS if e.claims], ids=lambda e: e.name)
def test_an_all_nan_run_cannot_be_judged(exp):
    """Issue 58: NaN never passes silently into a verdict. On a committed dataset whose measurements are all NaN, every
    claim says *cannot judge* (or *not run*, where the dataset cannot speak to it at all): never reproduced, partly or not."""
    import warnings
    label, ds = next(iter(claims.committed(exp, ROOT).items()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nan = _derived(exp, _all_nan(ds))
        wrong = {c.id: (v.status, v.value) for c in exp.claims.values() if (v := c(nan)).status not in ("cannot judge", "not run")}
    assert not wrong, f"{exp.name} ({label}), all measurements NaN: {wrong}"
