"""Write the probe images of a run's zoo folder from the data set, for a zoo kept without them (issue 62: the long (x4) run
of petrini_fig5 was started by code older than the probe file).

    python scripts/zoo_probes.py petrini_fig5 long x4 --data-root /path/to/data
    python scripts/zoo_probes.py EXPERIMENT PROFILE [TAG] [--data-root DIR] [--out-dir DIR]

It writes zoo/<experiment><suffix>/probe_images.npz (`zoo.write_probe_images`): the test images the run's cells probed
(its settings' `dataset` and `n_test`, the seeded draw every cell makes) as uint8 bytes with their indices, labels and
the data set's standardisation, after checking that every network of the folder scores its recorded error on exactly
these images. The measuring stage (`-p stage measure`) then needs no data set. `scripts/land_run.sh` runs it when it
lands a zoo without the file and the data set is there. --out-dir: the run's output folder (default: the committed files)."""
import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # this checkout's diffgeo, wherever it is run from


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", help="the experiment, by its name (petrini_fig5) or its notebook's (fig5)")
    p.add_argument("profile", help="the run's profile (long, paper, smoke)")
    p.add_argument("tag", nargs="?", default="", help="the run's tag (a variant: x4)")
    p.add_argument("--data-root", help="folder of the data files (default: the DIFFGEO_DATA environment variable)")
    p.add_argument("--out-dir", help="where the run wrote its results/ and zoo/ (default: the committed files)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from diffgeo import cli, zoo
    exp = cli.experiment(args.experiment)
    path = zoo.write_probe_images(exp.name, args.profile, args.tag, args.data_root, args.out_dir)
    _, info = zoo.load_probe_images(path.parent)
    n = len(zoo.index(exp.name, args.profile, args.tag, args.out_dir))
    shown = os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    print(f"wrote {shown}: {len(info['index'])} {info['dataset']} test images ({path.stat().st_size / 1e6:.2f} MB); "
          f"each of the {n} networks there scores its recorded error on them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
