from __future__ import annotations

from tftune.cli import main

if __name__ == "__main__":
    main(prog_name="tftune")
