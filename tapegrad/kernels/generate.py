"""Writes the kernel sources generated from tables: ``unary_rules.py`` and
``binary_rules.py`` from the rows of ``formulas.py``.

Run ``python tapegrad/kernels/generate.py`` after changing a row;
``tests/test_formulas.py`` fails while a generated file is not current. It
runs as a plain script, without importing tapegrad, whose import checks the
generated switches against the rows (a stale file would stop it).
"""
import os

try:
    from . import formulas
except ImportError:  # run as a script: formulas.py imports nothing of tapegrad's
    import formulas

#: generated file (in this folder) -> the function that renders its source
GENERATED = {"unary_rules.py": formulas.render, "binary_rules.py": formulas.render_binary}


def path(name):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def main():
    for name, render in GENERATED.items():
        with open(path(name), "w") as fh:
            fh.write(render())
        print(f"wrote {path(name)}")


if __name__ == "__main__":
    main()
