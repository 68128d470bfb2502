"""Tests of diffgeo.sweep: cells and their ids, shards, resuming a killed sweep, merging, and the submitit executors."""
import importlib.util
import json
import subprocess
import threading
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

import diffgeo.results as results
import diffgeo.sweep as sweep_module
from diffgeo.results import cf_attrs
from diffgeo.sweep import (EXECUTORS, ShardError, cell_id, grid_cells, merge_shards, missing_cells, run_sweep)

HAVE_SUBMITIT = importlib.util.find_spec("submitit") is not None

# ------------------------------------------------------------------------------------------------ a toy cell

DEPTH = {"FC": 2, "CNN": 5, "ResNet": 18}
CALLS: list[dict] = []   # the cells computed in this process
FAIL_AT: int | None = None  # the call that "kills" the sweep


class Killed(Exception):
    "Stands for the process being killed (a crash, a wall-time limit, Ctrl-C)."


def toy_cell(arch, seed, P, epochs=3, scale=1.0):
    "One cell: an 'error' per epoch drawn from a generator seeded by the cell only, and its architecture's depth."
    CALLS.append({"arch": arch, "seed": seed, "P": P})
    if FAIL_AT is not None and len(CALLS) == FAIL_AT: raise Killed(f"killed during call {FAIL_AT}")
    g = torch.Generator().manual_seed(1000 * seed + P)
    err = scale * torch.rand(epochs, generator=g, dtype=torch.float64) / (DEPTH[arch] * P) ** 0.5
    return xr.Dataset({"err": ("epoch", err.numpy(), cf_attrs("test error")),
                       "n_steps": ((), np.int32(epochs * P), cf_attrs("number of training steps"))},
                      coords={"epoch": ("epoch", np.arange(1, epochs + 1), cf_attrs("training epoch")),
                              "depth": ((), DEPTH[arch], cf_attrs("number of layers"))},
                      attrs={"note": "toy"})


def failing_cell(seed):
    "A cell that fails for odd seeds."
    if seed % 2: raise ValueError(f"seed {seed} diverged")
    return xr.Dataset({"x": ((), float(seed), cf_attrs("x"))})


GRID = {"arch": ["FC", "CNN"], "seed": [0, 1], "P": [8, 32]}
OPTS = dict(coords_on={"depth": "arch"}, dim_attrs={"P": cf_attrs("training set size")}, progress=False)


@pytest.fixture(autouse=True)
def fresh_calls(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(sys.modules[__name__], "FAIL_AT", None)


def sweep(shard_dir, **kw):
    return run_sweep(toy_cell, GRID, shard_dir, **{**OPTS, **kw})


# ------------------------------------------------------------------------------------------------ cells and ids

class TestCells:
    def test_product_first_key_slowest(self):
        cells = grid_cells({"a": [1, 2], "b": ["x", "y", "z"]})
        assert cells == [{"a": a, "b": b} for a in [1, 2] for b in ["x", "y", "z"]]
        assert [list(c) for c in cells] == [["a", "b"]] * 6

    def test_numpy_values_become_python(self):
        cells = grid_cells({"P": np.array([1, 2]), "T": np.array([0.5]), "bn": [np.bool_(True)]})
        assert [type(v) for v in cells[0].values()] == [int, float, bool]

    @pytest.mark.parametrize("grid, match", [
        ({}, "non-empty"), ([("a", [1])], "non-empty"),
        ({"a": "xyz"}, r"write \['xyz'\]"), ({"a": 3}, "list of values"), ({"a": []}, "empty"),
        ({"a": [1, 1.0]}, "repeats the value"), ({"a": [None]}, "str, int, float or bool"),
        ({"a": [float("inf")]}, "finite"), ({"2a": [1]}, "identifiers"), ({"a-b": [1]}, "identifiers")])
    def test_bad_grids(self, grid, match):
        with pytest.raises((ValueError, TypeError), match=match):
            grid_cells(grid)


class TestCellId:
    def test_readable(self):
        assert cell_id({"arch": "ResNet18", "seed": 0}) == "arch-ResNet18_seed-0"

    def test_stable(self):
        cell = {"arch": "ResNet18", "seed": 0, "T": 1e-5, "lr": 0.1, "bn": False}
        assert cell_id(cell) == cell_id(dict(reversed(cell.items()))) == "T-1e-05_arch-ResNet18_bn-False_lr-0.1_seed-0"
        assert cell_id({"seed": np.int64(3), "lr": np.float32(0.5)}) == cell_id({"seed": 3, "lr": 0.5})

    def test_distinguishes_values(self):
        assert len({cell_id({"x": v}) for v in [1, 1.5, -1, True, "a/b", "a_b", "a b", "a%2Fb"]}) == 8

    def test_whole_floats_name_the_cells_of_ints(self):
        "Grids [1, 2] and [1.0, 2.0] name the same shards; 1.5 and True stay apart."
        assert cell_id({"x": 1.0, "y": 2}) == cell_id({"x": 1, "y": 2.0}) == "x-1_y-2"
        assert cell_id({"x": 1.5}) != cell_id({"x": 1}) != cell_id({"x": True})
        assert cell_id({"x": 1.5}) == cell_id({"x": "1.5"})  # the same name: the shard's `cell` attribute tells them apart

    @pytest.mark.parametrize("value", ["a/b", "../x", "a b", "c:\\d", "é", "a*b?", "%41", "x" * 300, "", "\n"])
    def test_safe(self, value, tmp_path):
        cid = cell_id({"arch": value})
        assert len(cid) <= 200 and "/" not in cid and "\\" not in cid and not cid.startswith(".")
        assert set(cid) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+%~")
        (tmp_path / f"{cid}.nc").touch()  # a valid file name
        assert cid == cell_id({"arch": value})

    def test_long_ids_stay_distinct(self):
        assert cell_id({"arch": "x" * 300 + "a"}) != cell_id({"arch": "x" * 300 + "b"})

    @pytest.mark.parametrize("cell", [{"arch": [1]}, {"arch": None}, {"x": float("nan")}, {"x": torch.tensor(1)},
                                      {}, {"not ok": 1}, {1: 2}])
    def test_rejects(self, cell):
        with pytest.raises((TypeError, ValueError)):
            cell_id(cell)

    def test_colliding_ids_rejected(self, tmp_path):
        with pytest.raises(ValueError, match="same shard name 'seed-1'"):
            run_sweep(failing_cell, {"seed": [1, "1"]}, tmp_path, progress=False)
        with pytest.raises(ValueError, match="up to case"):
            grid = {"arch": ["ResNet", "resnet"]}
            run_sweep(failing_cell, grid, tmp_path, progress=False)
        assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ resume

class TestResume:
    @pytest.mark.parametrize("fail_at", [1, 3, 8])
    def test_killed_and_resumed_equals_uninterrupted(self, tmp_path, monkeypatch, fail_at):
        module = sys.modules[__name__]
        monkeypatch.setattr(module, "FAIL_AT", fail_at)
        with pytest.raises(Killed):
            sweep(tmp_path / "a" / "shards")
        cells = grid_cells(GRID)
        done = sorted(p.name for p in (tmp_path / "a" / "shards").glob("*"))  # no temporary files either
        assert done == sorted(f"{cell_id(c)}.nc" for c in cells[:fail_at - 1])
        assert missing_cells(GRID, tmp_path / "a" / "shards") == cells[fail_at - 1:]

        monkeypatch.setattr(module, "FAIL_AT", None)
        CALLS.clear()
        resumed = sweep(tmp_path / "a" / "shards")
        assert CALLS == cells[fail_at - 1:]  # only the missing cells, in grid order

        CALLS.clear()
        uninterrupted = sweep(tmp_path / "b" / "shards")
        assert CALLS == cells
        xr.testing.assert_identical(resumed, uninterrupted)

    def test_rerun_skips_finished_cells(self, tmp_path):
        first = sweep(tmp_path)
        assert len(CALLS) == 8
        CALLS.clear()
        xr.testing.assert_identical(sweep(tmp_path), first)
        assert CALLS == []
        xr.testing.assert_identical(merge_shards(GRID, tmp_path, coords_on={"depth": "arch"},
                                                 dim_attrs={"P": cf_attrs("training set size")}), first)

    def test_rerun_true_recomputes(self, tmp_path):
        first = sweep(tmp_path)
        CALLS.clear()
        xr.testing.assert_identical(sweep(tmp_path, rerun=True), first)
        assert len(CALLS) == 8

    def test_grown_grid_computes_only_new_cells(self, tmp_path):
        sweep(tmp_path)
        CALLS.clear()
        ds = run_sweep(toy_cell, {**GRID, "seed": [0, 1, 2]}, tmp_path, **OPTS)
        assert len(CALLS) == 4 and {c["seed"] for c in CALLS} == {2}
        assert ds.sizes["seed"] == 3

    def test_reordered_grid_reuses_shards(self, tmp_path):
        first = sweep(tmp_path)
        CALLS.clear()
        ds = run_sweep(toy_cell, {"P": GRID["P"], "seed": GRID["seed"], "arch": GRID["arch"]}, tmp_path, **OPTS)
        assert CALLS == []
        assert list(ds.err.dims) == ["P", "seed", "arch", "epoch"]
        assert ds.attrs.pop("grid") == '{"P": [8, 32], "seed": [0, 1], "arch": ["FC", "CNN"]}'
        first.attrs.pop("grid")
        xr.testing.assert_identical(ds.transpose(*first.err.dims), first)


class TestShardChecks:
    def test_changed_fixed_arguments_refused(self, tmp_path):
        sweep(tmp_path, fixed={"epochs": 3})
        CALLS.clear()
        with pytest.raises(ShardError, match=r"fixed=\{\"epochs\": 3\}.*fixed=\{\"epochs\": 4\}.*delete the shard folder.*rerun=True"):
            sweep(tmp_path, fixed={"epochs": 4})
        assert CALLS == []  # refused before computing anything
        with pytest.raises(ShardError, match="rerun=True"):
            sweep(tmp_path)  # no fixed arguments is a change too
        ds = sweep(tmp_path, fixed={"epochs": 4}, rerun=True)
        assert ds.sizes["epoch"] == 4 and ds.attrs["fixed"] == '{"epochs": 4}'

    def test_fixed_recorded_in_shards(self, tmp_path):
        sweep(tmp_path, fixed={"scale": 2.0, "epochs": np.int64(2)})
        shard = results.load_dataset(tmp_path / "P-8_arch-FC_seed-0.nc")
        assert shard.attrs["cell"] == '{"P": 8, "arch": "FC", "seed": 0}'
        assert shard.attrs["fixed"] == '{"epochs": 2, "scale": 2}'   # whole floats recorded as ints
        assert shard.attrs["note"] == "toy"

    def test_unreadable_shard_reported(self, tmp_path):
        sweep(tmp_path)
        (tmp_path / "P-8_arch-FC_seed-0.nc").write_bytes(b"not a netCDF file")
        with pytest.raises(ShardError, match=r"P-8_arch-FC_seed-0.nc cannot be read.*delete it"):
            sweep(tmp_path)
        with pytest.raises(ShardError, match="cannot be read"):
            merge_shards(GRID, tmp_path)

    def test_shard_of_another_cell_refused(self, tmp_path):
        sweep(tmp_path)
        shutil.copy(tmp_path / "P-8_arch-FC_seed-0.nc", tmp_path / "P-8_arch-FC_seed-1.nc")
        with pytest.raises(ShardError, match=r'holds the cell \{"P": 8, "arch": "FC", "seed": 0\}'):
            merge_shards(GRID, tmp_path)

    def test_foreign_netcdf_refused(self, tmp_path):
        xr.Dataset({"x": ((), 1.0)}).to_netcdf(tmp_path / "seed-0.nc", engine="netcdf4")
        with pytest.raises(ShardError, match="not written by run_sweep"):
            run_sweep(failing_cell, {"seed": [0]}, tmp_path, progress=False)

    def test_merge_refuses_mixed_fixed(self, tmp_path):
        run_sweep(toy_cell, {**GRID, "seed": [0]}, tmp_path, fixed={"epochs": 3}, **OPTS)
        run_sweep(toy_cell, {**GRID, "seed": [1]}, tmp_path, fixed={"epochs": 2}, **OPTS)
        with pytest.raises(ShardError, match="different fixed arguments"):
            merge_shards(GRID, tmp_path, coords_on={"depth": "arch"})


class TestMissing:
    def test_missing_cells_and_merge_error(self, tmp_path):
        assert missing_cells(GRID, tmp_path / "nowhere") == grid_cells(GRID)
        run_sweep(toy_cell, {**GRID, "P": [8]}, tmp_path, **OPTS)
        missing = missing_cells(GRID, tmp_path)
        assert missing == [c for c in grid_cells(GRID) if c["P"] == 32]
        with pytest.raises(FileNotFoundError, match=r"4 of 8 cells have no shard .*P-32_arch-FC_seed-0, "
                                                    r"P-32_arch-FC_seed-1, P-32_arch-CNN_seed-0, P-32_arch-CNN_seed-1"):
            merge_shards(GRID, tmp_path, coords_on={"depth": "arch"})

    def test_relative_paths_from_the_working_directory(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        run_sweep(toy_cell, {**GRID, "P": [8]}, "data/toy/shards", **OPTS)
        assert len(list((tmp_path / "data" / "toy" / "shards").glob("*.nc"))) == 4
        assert len(missing_cells(GRID, "data/toy/shards")) == 4


class TestCodeChanges:
    "A shard records the code that computed it; shards of other code are recomputed, kept on request (and recorded), or refused."
    OTHER = {"commit": "0123abc-dirty", "source_hash": "f" * 64}

    def other_code(self, monkeypatch):
        "From here on this process runs 'other code', as after an edit of the package."
        monkeypatch.setattr(results, "code_version", lambda: dict(self.OTHER))

    def test_shards_record_the_code(self, tmp_path):
        sweep(tmp_path)
        shard = results.load_dataset(tmp_path / "P-8_arch-FC_seed-0.nc")
        code = results.code_version()
        assert (shard.attrs["code_commit"], shard.attrs["code_hash"]) == (code["commit"], code["source_hash"])
        assert len(code["source_hash"]) == 64

    def test_recomputed_by_default(self, tmp_path, monkeypatch, capsys):
        first = sweep(tmp_path)
        assert sweep_module.cell_states(GRID, tmp_path) == ["done"] * 8
        self.other_code(monkeypatch)
        assert sweep_module.cell_states(GRID, tmp_path) == ["stale"] * 8
        CALLS.clear()
        ds = sweep(tmp_path)
        assert CALLS == grid_cells(GRID)
        said = capsys.readouterr().out
        assert "8 of 8 shards" in said and "were computed by other code" in said and "code_changed='reuse'" in said
        assert json.loads(ds.attrs["cell_commits"]) == [{**self.OTHER, "cells": 8}]
        assert "other_code_cells" not in ds.attrs and "code_changed" not in ds.attrs
        assert results.load_dataset(tmp_path / "P-8_arch-FC_seed-0.nc").attrs["code_hash"] == "f" * 64
        xr.testing.assert_identical(ds.drop_attrs(), first.drop_attrs())   # the toy cell itself did not change

    def test_reuse_is_explicit_and_recorded(self, tmp_path, monkeypatch):
        sweep(tmp_path)
        before = results.code_version()
        self.other_code(monkeypatch)
        CALLS.clear()
        ds = sweep(tmp_path, code_changed="reuse")
        assert CALLS == []
        assert ds.attrs["code_changed"] == "reuse"
        assert json.loads(ds.attrs["cell_commits"]) == [{**before, "cells": 8}]
        assert json.loads(ds.attrs["other_code_cells"]) == [cell_id(c) for c in grid_cells(GRID)]

    def test_error_refuses_naming_the_options(self, tmp_path, monkeypatch):
        sweep(tmp_path)
        self.other_code(monkeypatch)
        CALLS.clear()
        with pytest.raises(ShardError, match="8 of 8 shards .* other code .*code_changed='recompute'.*code_changed='reuse'"):
            sweep(tmp_path, code_changed="error")
        assert CALLS == []
        with pytest.raises(ValueError, match="code_changed 'keep'; valid values are 'recompute', 'reuse', 'error'"):
            sweep(tmp_path, code_changed="keep")

    def test_shards_without_a_recorded_code_count_as_other_code(self, tmp_path, capsys):
        sweep(tmp_path)
        old = tmp_path / "P-8_arch-FC_seed-0.nc"   # as written before shards recorded their code
        ds = results.load_dataset(old)
        for k in ("code_commit", "code_hash"): del ds.attrs[k]
        ds.to_netcdf(old)
        CALLS.clear()
        merged = sweep(tmp_path, code_changed="reuse")
        assert CALLS == [] and json.loads(merged.attrs["other_code_cells"]) == ["P-8_arch-FC_seed-0"]
        assert {"commit": "unknown", "source_hash": "unknown", "cells": 1} in json.loads(merged.attrs["cell_commits"])
        sweep(tmp_path)
        assert CALLS == [{"arch": "FC", "seed": 0, "P": 8}] and "not recorded" in capsys.readouterr().out

    def test_the_cell_sees_the_policy(self, tmp_path):
        "The policy reaches the code inside a cell (train's checkpoints) through results.code_change_policy()."
        seen = []
        def cell(seed):
            seen.append(results.code_change_policy())
            return xr.Dataset({"x": ((), float(seed), cf_attrs("x"))})
        run_sweep(cell, {"seed": [0]}, tmp_path / "a", progress=False, code_changed="reuse")
        run_sweep(cell, {"seed": [0]}, tmp_path / "b", progress=False)
        assert seen == ["reuse", "recompute"]

    # another process (running other code) holds a cell's claim and writes its shard while this one waits

    def claimed_by_other_code(self, monkeypatch, times=1):
        """Make the cell seed-1 claimed elsewhere `times` times: each time, "the other process" writes its shard from other
        code and releases its claim, as a process running an older checkout of the package would."""
        real, taken = sweep_module._run_cell, []
        def run_cell(fn, cell, fixed, path, *args):
            if cell == {"seed": 1} and len(taken) < times:
                assert len(taken) < 5, "the sweep keeps waiting for the other process"
                taken.append(cell)
                ds = slow_toy_cell(**cell).assign_attrs(cell=sweep_module._cell_json(cell), fixed=sweep_module._fixed_json(fixed),
                                                        code_commit=self.OTHER["commit"], code_hash=self.OTHER["source_hash"])
                results.atomic_write(Path(path), lambda tmp: ds.to_netcdf(tmp))
                return "claimed"
            return real(fn, cell, fixed, path, *args)
        monkeypatch.setattr(sweep_module, "_run_cell", run_cell)
        return taken

    def test_a_shard_of_other_code_written_while_waiting_is_recomputed(self, tmp_path, monkeypatch):
        taken = self.claimed_by_other_code(monkeypatch)
        ds = run_sweep(slow_toy_cell, {"seed": [0, 1, 2]}, tmp_path, progress=False)
        assert len(taken) == 1 and sorted(c["seed"] for c in CALLS) == [0, 1, 1, 2]   # seed 1: elsewhere, then here
        assert "other_code_cells" not in ds.attrs
        assert json.loads(ds.attrs["cell_commits"]) == [{**results.code_version(), "cells": 3}]

    def test_recomputed_once_only(self, tmp_path, monkeypatch):
        "A process that keeps writing the cell from other code does not make the sweep wait forever: kept, and said so."
        taken = self.claimed_by_other_code(monkeypatch, times=10)
        with pytest.warns(UserWarning, match="seed-1.*other code"):
            ds = run_sweep(slow_toy_cell, {"seed": [0, 1, 2]}, tmp_path, progress=False)
        assert len(taken) == 2
        assert json.loads(ds.attrs["other_code_cells"]) == ["seed-1"]

    def test_a_shard_of_other_code_written_while_waiting_refused_under_error(self, tmp_path, monkeypatch):
        self.claimed_by_other_code(monkeypatch)
        with pytest.raises(ShardError, match="seed-1.*other code.*code_changed='recompute'.*code_changed='reuse'"):
            run_sweep(slow_toy_cell, {"seed": [0, 1, 2]}, tmp_path, progress=False, code_changed="error")

    def test_a_shard_of_other_code_written_while_waiting_kept_under_reuse(self, tmp_path, monkeypatch):
        taken = self.claimed_by_other_code(monkeypatch)
        ds = run_sweep(slow_toy_cell, {"seed": [0, 1, 2]}, tmp_path, progress=False, code_changed="reuse")
        assert len(taken) == 1 and sorted(c["seed"] for c in CALLS) == [0, 1, 2]
        assert json.loads(ds.attrs["other_code_cells"]) == ["seed-1"] and ds.attrs["code_changed"] == "reuse"

    def test_a_job_refuses_a_shard_of_other_code_under_error(self, tmp_path, monkeypatch):
        "A shard that appeared between the sweep's scan and the job's claim is checked in the job too."
        path = tmp_path / "seed-0.nc"
        sweep_module._run_cell(slow_toy_cell, {"seed": 0}, {}, str(path))
        self.other_code(monkeypatch)
        CALLS.clear()
        with pytest.raises(ShardError, match="other code.*code_changed='recompute'.*code_changed='reuse'"):
            sweep_module._run_cell(slow_toy_cell, {"seed": 0}, {}, str(path), code_changed="error")
        assert sweep_module._run_cell(slow_toy_cell, {"seed": 0}, {}, str(path), code_changed="reuse") == "done"
        assert CALLS == []

    def test_a_stale_cell_recomputed_elsewhere_is_running_elsewhere(self, tmp_path, monkeypatch):
        sweep(tmp_path)
        self.other_code(monkeypatch)
        lock = sweep_module._lock_path(tmp_path / "P-8_arch-FC_seed-0.nc")
        lock.write_text(json.dumps(sweep_module._owner()))          # a live claim: this process's
        assert sweep_module.cell_states(GRID, tmp_path) == ["running elsewhere"] + ["stale"] * 7


# ------------------------------------------------------------------------------------------------ the merged dataset

class TestMerge:
    def test_layout_and_attributes(self, tmp_path):
        ds = sweep(tmp_path)
        assert list(ds.err.dims) == ["arch", "seed", "P", "epoch"]
        assert list(ds.n_steps.dims) == ["arch", "seed", "P"]
        assert list(ds.dims)[:3] == ["arch", "seed", "P"]
        assert ds.arch.values.tolist() == ["FC", "CNN"] and ds.seed.values.tolist() == [0, 1]
        assert ds.depth.dims == ("arch",) and ds.depth.values.tolist() == [2, 5]
        assert ds.depth.attrs == cf_attrs("number of layers")
        assert ds.arch.attrs == {"long_name": "arch", "units": "1"} and ds.P.attrs == cf_attrs("training set size")
        assert ds.err.attrs == cf_attrs("test error") and ds.epoch.attrs == cf_attrs("training epoch")
        cell_commits = json.dumps([{**results.code_version(), "cells": 8}])
        assert ds.attrs == {"note": "toy", "fixed": "{}", "grid": '{"arch": ["FC", "CNN"], "seed": [0, 1], "P": [8, 32]}',
                            "cell_commits": cell_commits}
        results.check_cf(ds)
        one = toy_cell("CNN", 1, 32)
        np.testing.assert_array_equal(ds.err.sel(arch="CNN", seed=1, P=32).values, one.err.values)

    def test_saves_and_loads_identically(self, tmp_path):
        ds = sweep(tmp_path / "shards")
        results.stamp(ds, {"grid": GRID}, "cpu", results.now())
        back = results.load_dataset(results.save_dataset(ds, tmp_path / "merged.nc"))
        xr.testing.assert_identical(back, results.cf_conventions(ds))   # the file adds the CF conventions' attributes

    def test_single_cell(self, tmp_path):
        ds = run_sweep(toy_cell, {"arch": ["FC"], "seed": [0], "P": [8]}, tmp_path, **OPTS)
        assert ds.err.shape == (1, 1, 1, 3) and "cell" not in ds.attrs

    def test_scalar_coord_needs_coords_on(self, tmp_path):
        with pytest.raises(ValueError, match=r"scalar coordinate 'depth' is 2 .* but 5 .*coords_on=\{'depth': dim\}"):
            run_sweep(toy_cell, GRID, tmp_path, progress=False)
        # a scalar coordinate that is the same in every cell stays a scalar coordinate
        ds = run_sweep(toy_cell, {**GRID, "arch": ["FC"]}, tmp_path, progress=False)
        assert ds.depth.ndim == 0 and int(ds.depth) == 2

    def test_coords_on_must_be_a_function_of_its_dim(self, tmp_path):
        with pytest.raises(ValueError, match="not a function of 'seed' alone"):
            run_sweep(toy_cell, GRID, tmp_path, coords_on={"depth": "seed"}, progress=False)

    @pytest.mark.parametrize("coords_on, match", [({"depth": "layer"}, "not a grid dimension"),
                                                  ({"seed": "arch"}, "sweep dimension"),
                                                  ({"width": "arch"}, "no scalar coordinate 'width'")])
    def test_bad_coords_on(self, tmp_path, coords_on, match):
        with pytest.raises(ValueError, match=match):
            run_sweep(toy_cell, GRID, tmp_path, coords_on=coords_on, progress=False)

    def test_bad_dim_attrs(self, tmp_path):
        with pytest.raises(ValueError, match="not grid dimensions"):
            run_sweep(toy_cell, GRID, tmp_path, dim_attrs={"T": {}}, progress=False)


# ------------------------------------------------------------------------------------------------ checks of the request

class TestRequestChecks:
    def test_unknown_executor_lists_valid(self, tmp_path):
        with pytest.raises(ValueError, match=r"unknown executor 'dask'; valid values are 'inline', 'local', 'slurm'"):
            sweep(tmp_path, executor="dask")
        assert EXECUTORS == ("inline", "local", "slurm")

    def test_options_need_a_job_executor(self, tmp_path):
        with pytest.raises(ValueError, match="not 'inline'"):
            sweep(tmp_path, executor_options={"timeout_min": 5})

    def test_signature_checked_before_any_cell(self, tmp_path):
        with pytest.raises(TypeError, match=r"fn\(arch, seed, P, width\)"):
            sweep(tmp_path, fixed={"width": 3})
        with pytest.raises(TypeError, match=r"cannot be called"):
            run_sweep(toy_cell, {"arch": ["FC"], "seed": [0]}, tmp_path, progress=False)
        assert CALLS == []

    def test_fixed_and_grid_overlap(self, tmp_path):
        with pytest.raises(ValueError, match=r"\['seed'\] appear twice"):
            sweep(tmp_path, fixed={"seed": 3})
        with pytest.raises(ValueError, match=r"\['scale'\] appear twice"):
            sweep(tmp_path, fixed={"scale": 2.0}, runtime={"scale": 3.0})

    def test_fixed_must_be_json(self, tmp_path):
        with pytest.raises(TypeError, match="JSON-serialisable"):
            sweep(tmp_path, fixed={"scale": object()})

    def test_cell_must_return_a_clean_dataset(self, tmp_path):
        with pytest.raises(TypeError, match="must return an xarray.Dataset"):
            run_sweep(lambda seed: seed, {"seed": [0]}, tmp_path, progress=False)
        with pytest.raises(ValueError, match=r"\['seed'\], which are sweep dimensions"):
            run_sweep(lambda seed: xr.Dataset({"x": ("seed", [1.0], cf_attrs("x"))}), {"seed": [0]}, tmp_path, progress=False)
        with pytest.raises(ValueError, match=r"variables \['x'\] need 'long_name' and 'units'"):
            run_sweep(lambda seed: xr.Dataset({"x": ((), 1.0)}), {"seed": [0]}, tmp_path, progress=False)
        assert list(tmp_path.iterdir()) == []

    def test_progress_bar(self, tmp_path, monkeypatch, capsys):
        monkeypatch.setenv("DIFFGEO_PROGRESS", "1")
        ds = sweep(tmp_path, progress=True)
        assert ds.sizes["arch"] == 2
        assert "sweep" in capsys.readouterr().err

    def test_missing_submitit(self, tmp_path, monkeypatch):
        monkeypatch.setitem(sys.modules, "submitit", None)  # makes `import submitit` fail
        with pytest.raises(ImportError, match="pip install submitit"):
            sweep(tmp_path, executor="local")

    def test_no_submitit_needed_when_done(self, tmp_path, monkeypatch):
        first = sweep(tmp_path)
        monkeypatch.setitem(sys.modules, "submitit", None)
        xr.testing.assert_identical(sweep(tmp_path, executor="slurm", executor_options={"timeout_min": 5}), first)

    @pytest.mark.skipif(not HAVE_SUBMITIT, reason="submitit is not installed")
    def test_slurm_needs_a_time_limit(self, tmp_path):
        with pytest.raises(ValueError, match="timeout_min"):
            sweep(tmp_path, executor="slurm")

    @pytest.mark.skipif(not HAVE_SUBMITIT, reason="submitit is not installed")
    def test_executor_options(self, tmp_path, monkeypatch):
        "The same options configure both executors; on Slurm, max_parallel bounds the job array."
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "srun").write_text("#!/bin/sh\nexit 0\n")
        (fake / "srun").chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")  # submitit looks for srun
        opts = {"timeout_min": 600, "gpus_per_node": 1, "cpus_per_task": 8, "mem_gb": 32, "slurm_partition": "gpu"}
        slurm = sweep_module._executor("slurm", tmp_path / "submitit", opts, 20, "diffgeo-toy")
        assert slurm._executor.parameters == {"job_name": "diffgeo-toy", "time": 600, "gpus_per_node": 1,
                                              "cpus_per_task": 8, "mem": "32GB", "partition": "gpu",
                                              "array_parallelism": 20}
        local = sweep_module._executor("local", tmp_path / "submitit", {**opts, "gpus_per_node": 0}, 1, "diffgeo-toy")
        assert local._executor.parameters["timeout_min"] == 600
        assert sweep_module._executor("local", tmp_path / "submitit", {}, 1, "x")._executor.parameters["timeout_min"] >= 24 * 60


# ------------------------------------------------------------------------------------------------ submitit jobs

@pytest.fixture
def by_value():
    """Send this module's functions to the job processes by value.

    The jobs are fresh Python processes that unpickle the cell function. pytest imports this file as a top-level
    module from `tests/` (not a package, not on the jobs' path), so pickling its functions by reference, cloudpickle's
    default for a module, would fail in the job with ModuleNotFoundError. An experiment's cell function lives in
    `diffgeo.experiments.*` and needs none of this.
    """
    import cloudpickle
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SUBMITIT, reason="submitit is not installed")
class TestSubmititLocal:
    def test_local_equals_inline(self, tmp_path, by_value):
        grid = {"arch": ["FC", "CNN"], "seed": [0], "P": [8]}
        opts = {**OPTS, "coords_on": {"depth": "arch"}}
        t0 = time.perf_counter()
        local = run_sweep(toy_cell, grid, tmp_path / "local" / "shards", fixed={"epochs": 2}, executor="local",
                          executor_options={"timeout_min": 2}, max_parallel=2, **opts)
        assert time.perf_counter() - t0 < 60
        assert CALLS == []  # computed in the jobs, not here
        assert (tmp_path / "local" / "submitit").is_dir()  # the logs, beside the shards
        inline = run_sweep(toy_cell, grid, tmp_path / "inline" / "shards", fixed={"epochs": 2}, **opts)
        xr.testing.assert_identical(local, inline)
        CALLS.clear()  # a finished sweep resumes inline without jobs
        xr.testing.assert_identical(run_sweep(toy_cell, grid, tmp_path / "local" / "shards", fixed={"epochs": 2}, **opts),
                                    inline)
        assert CALLS == []

    def test_jobs_record_their_own_code(self, tmp_path, by_value, monkeypatch):
        "A job records the code its own process runs, not the submitting process's."
        monkeypatch.setattr(results, "code_version", lambda: {"commit": "parent", "source_hash": "p" * 64})
        ds = run_sweep(toy_cell, {"arch": ["FC"], "seed": [0], "P": [8]}, tmp_path / "shards", executor="local",
                       executor_options={"timeout_min": 2}, **OPTS)
        monkeypatch.undo()
        assert json.loads(ds.attrs["cell_commits"]) == [{**results.code_version(), "cells": 1}]
        assert json.loads(ds.attrs["other_code_cells"]) == ["P-8_arch-FC_seed-0"]   # other than the merging process's

    def test_failed_jobs_reported(self, tmp_path, by_value):
        with pytest.raises(RuntimeError, match=r"(?s)1 of 2 cells failed: seed-1; .*Logs: .*submitit.*seed 1 diverged"):
            run_sweep(failing_cell, {"seed": [0, 1]}, tmp_path / "shards", executor="local", max_parallel=2,
                      progress=False)
        assert missing_cells({"seed": [0, 1]}, tmp_path / "shards") == [{"seed": 1}]


# ------------------------------------------------------------------------------------------------ claims: concurrent runs

TWO_RUNS = '''
import json, os, sys, time
from pathlib import Path
import xarray as xr
from diffgeo.results import cf_attrs
from diffgeo.sweep import run_sweep

def slow_cell(seed):
    "Half a second of 'work'; each computation appends this process's id to a log of its cell."
    with open(Path(sys.argv[1]) / f"computed-{seed}.log", "a") as f: f.write(f"{os.getpid()}\\n")
    time.sleep(0.5)
    return xr.Dataset({"x": ((), float(seed), cf_attrs("x"))})

go = Path(sys.argv[1]) / "go"
while not go.exists(): time.sleep(0.01)          # both processes ready: start together
ds = run_sweep(slow_cell, {"seed": list(range(8))}, Path(sys.argv[1]) / "shards", progress=False)
ds.to_netcdf(Path(sys.argv[1]) / f"merged-{os.getpid()}.nc")
'''


def slow_toy_cell(seed, delay=0.0):
    "A toy cell that takes `delay` seconds."
    CALLS.append({"seed": seed})
    time.sleep(delay)
    return xr.Dataset({"x": ((), float(seed), cf_attrs("x"))})


class TestClaims:
    def test_two_processes_share_the_work(self, tmp_path):
        "Two processes running one sweep compute each cell once between them, and merge the same dataset."
        script = tmp_path / "two_runs.py"
        script.write_text(TWO_RUNS)
        procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path)]) for _ in range(2)]
        time.sleep(0.5)
        (tmp_path / "go").touch()
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        logs = {s: (tmp_path / f"computed-{s}.log").read_text().split() for s in range(8)}
        assert all(len(v) == 1 for v in logs.values()), f"cells computed more than once: {logs}"
        workers = {v[0] for v in logs.values()}
        assert workers == {str(p.pid) for p in procs}, "one process did all the work"
        a, b = (results.load_dataset(tmp_path / f"merged-{p.pid}.nc") for p in procs)
        xr.testing.assert_identical(a, b)
        assert not list((tmp_path / "shards").glob("*lock*")), "a claim was left behind"

    def test_waits_for_a_cell_held_elsewhere(self, tmp_path):
        "A cell claimed by a live owner is not computed again: the sweep waits for its shard."
        path = tmp_path / "shards" / "seed-1.nc"
        other = threading.Thread(target=sweep_module._run_cell, args=(slow_toy_cell, {"seed": 1}, {"delay": 1.5}, str(path)))
        other.start()
        while not sweep_module._lock_path(path).exists(): time.sleep(0.01)
        ds = run_sweep(slow_toy_cell, {"seed": [0, 1, 2]}, tmp_path / "shards", fixed={"delay": 1.5}, progress=False)
        other.join()
        assert sorted(c["seed"] for c in CALLS) == [0, 1, 2]   # seed 1 once, by the other thread
        assert ds.x.values.tolist() == [0.0, 1.0, 2.0]

    def test_claim_of_a_dead_process_taken_over(self, tmp_path):
        dead = subprocess.Popen(["true"]); dead.wait()
        (tmp_path / "shards").mkdir()
        lock = sweep_module._lock_path(tmp_path / "shards" / "seed-0.nc")
        lock.write_text(json.dumps({**sweep_module._owner(), "pid": dead.pid}))
        run_sweep(slow_toy_cell, {"seed": [0]}, tmp_path / "shards", progress=False)
        assert CALLS == [{"seed": 0}] and not lock.exists()

    def test_stale_claim_of_another_host_taken_over(self, tmp_path, monkeypatch):
        monkeypatch.setattr(sweep_module, "STALE_AFTER", 1.0)
        (tmp_path / "shards").mkdir()
        lock = sweep_module._lock_path(tmp_path / "shards" / "seed-0.nc")
        lock.write_text(json.dumps({**sweep_module._owner(), "host": "another-node", "slurm_job": None}))
        t0 = time.perf_counter()
        run_sweep(slow_toy_cell, {"seed": [0]}, tmp_path / "shards", progress=False)
        assert CALLS == [{"seed": 0}] and time.perf_counter() - t0 >= 0.9   # waited for the heartbeat to go stale

    def test_a_wait_on_another_host_says_whom_and_how_long(self, tmp_path, monkeypatch, capsys):
        "A sweep waiting on another host's claim names the host, PID, start and cells, the rule that ends the wait, and reports again."
        monkeypatch.setattr(sweep_module, "STALE_AFTER", 2.5)
        monkeypatch.setattr(sweep_module, "WAIT_REPORT", 0.5)
        (tmp_path / "shards").mkdir()
        lock = sweep_module._lock_path(tmp_path / "shards" / "seed-0.nc")
        lock.write_text(json.dumps({**sweep_module._owner(), "host": "another-node", "pid": 4242, "slurm_job": None,
                                    "since": "2026-12-07T10:00:00+0000"}))
        run_sweep(slow_toy_cell, {"seed": [0]}, tmp_path / "shards", progress=False)
        out = capsys.readouterr().out
        assert "waiting for 1 cells that other processes are computing: another-node PID 4242, since 2026-12-07T10:00:00+0000" in out
        assert "seed-0" in out and "2 s after its last heartbeat" in out and "Stop this process to leave them" in out
        assert "still waiting, after 0 min, for 1 cells: another-node PID 4242" in out
        assert CALLS == [{"seed": 0}]   # taken over once stale

    def test_claim_of_an_ended_slurm_job_taken_over(self, tmp_path, monkeypatch):
        "A claim of a Slurm job that squeue no longer lists (cancelled, killed) is abandoned, wherever it ran."
        fake = tmp_path / "bin"; fake.mkdir()
        (fake / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
        (fake / "squeue").chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
        lock = tmp_path / "seed-0.lock"
        lock.write_text(json.dumps({**sweep_module._owner(), "host": "another-node", "slurm_job": "123_4"}))
        assert sweep_module._claim_state(lock)[0] == "abandoned"
        (fake / "squeue").write_text("#!/bin/sh\necho RUNNING\n")
        assert sweep_module._claim_state(lock)[0] == "held"

    def test_heartbeat_keeps_a_claim_fresh_and_notices_a_takeover(self, tmp_path, monkeypatch):
        monkeypatch.setattr(sweep_module, "HEARTBEAT", 0.05)
        path = tmp_path / "seed-0.nc"
        lock = sweep_module._lock_path(path)
        with pytest.warns(UserWarning, match="taken over by another process"):
            with sweep_module._claim(path) as mine:
                assert mine
                os.utime(lock, (0, 0))
                time.sleep(0.3)
                assert time.time() - lock.stat().st_mtime < 1     # the heartbeat touched it
                lock.write_text(json.dumps(sweep_module._owner()))  # another process's claim now
                time.sleep(0.3)
        assert lock.exists()   # not ours: left in place

    def test_inline_failure_says_rerun_resumes(self, tmp_path):
        with pytest.raises(ValueError, match="seed 1 diverged") as e:
            run_sweep(failing_cell, {"seed": [0, 1, 2]}, tmp_path / "shards", progress=False)
        assert any("running the sweep again resumes" in n for n in e.value.__notes__)
        assert missing_cells({"seed": [0, 1, 2]}, tmp_path / "shards") == [{"seed": 1}, {"seed": 2}]
        assert not list((tmp_path / "shards").glob("*.lock"))

    def test_runtime_arguments_are_not_the_shards_identity(self, tmp_path):
        "A sweep started with one device (or data folder) resumes with another: runtime arguments are not recorded."
        grid = {"arch": ["FC"], "seed": [0, 1], "P": [8]}
        kw = dict(fixed={"epochs": 2}, progress=False, coords_on={"depth": "arch"})
        a = run_sweep(device_cell, grid, tmp_path / "shards", runtime={"device": "cpu"}, **kw)
        CALLS.clear()
        b = run_sweep(device_cell, grid, tmp_path / "shards", runtime={"device": "cuda"}, **kw)
        assert CALLS == []
        xr.testing.assert_identical(a, b)
        assert "device" not in results.load_dataset(tmp_path / "shards" / "P-8_arch-FC_seed-0.nc").attrs["fixed"]

    def test_whole_floats_resume_int_grids(self, tmp_path):
        a = run_sweep(toy_cell, {"arch": ["FC"], "seed": [0], "P": [8, 32]}, tmp_path, fixed={"scale": 2}, **OPTS)
        CALLS.clear()
        b = run_sweep(toy_cell, {"arch": ["FC"], "seed": [0.0], "P": [8.0, 32.0]}, tmp_path, fixed={"scale": 2.0}, **OPTS)
        assert CALLS == []
        np.testing.assert_array_equal(a.err.values, b.err.values)


def device_cell(arch, seed, P, epochs, device):
    "toy_cell, told its device (which does not change the result)."
    return toy_cell(arch, seed, P, epochs)
