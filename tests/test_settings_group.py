"""Settings declared once per paper (issue 61): the Petrini et al. cells take the paper's training and probing settings as
`**recipe: Unpack[petrini.Recipe]`, spelled out by `scaffold.with_settings_group`."""
import inspect

import pytest

from diffgeo import scaffold
from diffgeo.experiments import petrini, petrini_fig3, petrini_fig5, petrini_fig6, petrini_fig12, petrini_tab2

CELLS = [petrini_fig3, petrini_fig5, petrini_fig6, petrini_fig12, petrini_tab2]
FIELDS = list(petrini.Recipe.__annotations__)


@pytest.mark.parametrize("module", CELLS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_petrini_cell_takes_the_recipe_once(module):
    "Each cell's signature lists every field of the recipe, none of them written in the module's own cell signature."
    params = inspect.signature(module.cell).parameters
    assert set(FIELDS) <= set(params), sorted(set(FIELDS) - set(params))
    own = inspect.signature(inspect.unwrap(module.cell)).parameters
    assert not set(FIELDS) & set(own), f"{module.__name__} spells {sorted(set(FIELDS) & set(own))} again"
    assert params["data_root"].default is None and params["steps"].default is inspect.Parameter.empty
    assert module.EXPERIMENT._cell is module.cell


def test_the_recipe_documents_every_field():
    docs = scaffold.field_docs(petrini.Recipe)
    assert list(docs) == FIELDS and all(docs.values())
    assert all(f"{k}: {docs[k]}" in petrini_fig6.cell.__doc__ for k in FIELDS)


def test_a_missing_or_misspelt_setting_is_refused_naming_the_recipe():
    kw = {k: None for k in FIELDS}
    for bad in ({k: v for k, v in kw.items() if k != "warmup"}, {**kw, "warmpu": 0.1}):
        with pytest.raises(TypeError, match=r"petrini\.Recipe"):
            petrini_fig6.cell("LeNet", 64, 0, [3], ["bilinear"], 1.0, **bad)


def test_a_group_that_is_not_a_typeddict_is_refused():
    from typing import Unpack
    def cell(arch: str, **recipe: Unpack[dict]): ...
    with pytest.raises(TypeError):
        scaffold.with_settings_group(cell)
