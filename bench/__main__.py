"""`python -m bench ...`: the xferbench command (bench.cli.run); torchrun starts it so too."""
from bench.cli.run import main

if __name__ == "__main__":
    main()
