"""What every benchmark does with its figures: print them, and save them with the plot."""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).parent / "out"


class Report:
    """Lines printed as they come, then saved with the figure as bench/out/<name>.md."""

    def __init__(self, name: str, title: str):
        self.name, self.title, self.lines = name, title, []

    def say(self, line: str) -> None:
        print(line)
        self.lines.append(line)

    def save(self, figure) -> None:
        OUT.mkdir(exist_ok=True)
        figure.tight_layout()
        figure.savefig(OUT / f"{self.name}.png", dpi=120)
        (OUT / f"{self.name}.md").write_text(f"# {self.title}\n\n```\n" + "\n".join(self.lines)
                                             + f"\n```\n\n![figure]({self.name}.png)\n")
        print(f"wrote {OUT / self.name}.png and .md")
