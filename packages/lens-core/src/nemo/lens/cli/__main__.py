"""`python -m nemo.lens.cli`: the same command as the `lens` console script."""

from nemo.lens.cli import run

if __name__ == "__main__":
    run()
