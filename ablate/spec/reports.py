"""A ``reports:`` entry with options: which sections of a report, in which order, over which
cells, in which variant order, against which reference.

    reports:
      - accuracy                                  # the whole report, every cell
      - name: norm_stability
        sections: [the-answer, factor-effects, state-norm-vs-training-step]
        cells: {model.layers: [1, 2]}             # the design's selector language (--cells)
        order: [model.normalisation]              # variants sorted by these factors' levels
        reference: "rotation · gamma"             # a cell label or id; default: the baseline

Sections are the report's ``## `` headings as ``ablate.report.slug`` writes them
(``ablate.report.headings``). Which cells and factors exist is known only with the design: those
are checked by ``ablate.design.check`` (``report_problems``), the shape here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ablate.report import REPORTS, headings
from ablate.spec.errors import not_one_of

__all__ = ["ReportOptions"]


class ReportOptions(BaseModel):
    """One report of a study, with the parts of it to show."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)

    name: str = Field(description="the report: " + ", ".join(REPORTS))
    sections: list[str] | None = Field(
        None, description="the sections to show, in this order (their headings, lower case, words joined by '-': "
                          "the-answer, summary, …); default: every section in the report's order")
    cells: dict[str, Any] | list[dict[str, Any]] = Field(
        default_factory=list,
        description="only the cells matching this selector (factor or dotted path → level label or value; a list: "
                    "any of them), as `ablate report --cells`; default: every cell")
    order: list[str] = Field(
        default_factory=list,
        description="factors (names or dotted paths) to sort the variants by, first the first, in each factor's "
                    "level order; default: the design's order")
    reference: str | None = Field(
        None, description="the cell every variant is compared with (its label or id); default: the baseline cell")

    @field_validator("name")
    @classmethod
    def _report(cls, v: str) -> str:
        if v not in REPORTS:
            raise ValueError(not_one_of(v, REPORTS))
        return v

    @field_validator("sections")
    @classmethod
    def _unique(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("lists at least one section (leave it out for all)")
        if v is not None and len(set(v)) != len(v):
            raise ValueError("lists a section twice")
        return v

    def section_problems(self, where: str) -> list[tuple[str, str]]:
        """Sections the report does not have, with the valid ones and the closest."""
        valid = headings(self.name)
        return [(f"{where}.sections[{i}]", not_one_of(s, valid)) for i, s in enumerate(self.sections or [])
                if s not in valid]

    @property
    def selectors(self) -> list[dict[str, Any]]:
        """``cells`` as a list of selectors (none: every cell)."""
        return [self.cells] if isinstance(self.cells, dict) and self.cells else list(self.cells or [])
