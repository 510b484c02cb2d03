"""The typed feature schema: every model input has a role and a kind.

The model's input sizes are derived from this schema in one place (`FeatureSchema.sizes`), and the schema is saved
with the model (`to_dict` / `from_dict`) so forecasting needs no training data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

# Code of a series not in the training vocabulary: it gets embedding row 0 and the pooled scalers (fitted on all
# training rows). Row 0 is only trained if the trainer masks series codes; otherwise it stays at its initial value.
UNKNOWN_SERIES = 0


class Role(StrEnum):
    STATIC = "static"  # constant per series (e.g. series identity)
    KNOWN = "known"  # known in advance for past and future bars (calendar)
    OBSERVED = "observed"  # only known up to the forecast origin (returns, range, volume)


class Kind(StrEnum):
    CATEGORICAL = "categorical"
    CONTINUOUS = "continuous"


@dataclass(frozen=True)
class Feature:
    name: str
    role: Role
    kind: Kind
    cardinality: int = 0  # categorical only: number of codes (code 0 is reserved for "unknown")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role.value, "kind": self.kind.value, "cardinality": self.cardinality}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Feature:
        return Feature(d["name"], Role(d["role"]), Kind(d["kind"]), int(d.get("cardinality", 0)))


@dataclass(frozen=True)
class InputSizes:
    """What the model needs to know about its inputs; derived from a schema, never written by hand."""

    static_cat: tuple[int, ...]  # cardinality of each static categorical
    static_cont: int
    known_cat: tuple[int, ...]
    known_cont: int
    observed_cat: tuple[int, ...]
    observed_cont: int

    @property
    def n_static(self) -> int:
        return len(self.static_cat) + self.static_cont

    @property
    def n_encoder(self) -> int:
        return len(self.known_cat) + self.known_cont + len(self.observed_cat) + self.observed_cont

    @property
    def n_decoder(self) -> int:
        return len(self.known_cat) + self.known_cont

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> InputSizes:
        return InputSizes(
            static_cat=tuple(d["static_cat"]),
            static_cont=int(d["static_cont"]),
            known_cat=tuple(d["known_cat"]),
            known_cont=int(d["known_cont"]),
            observed_cat=tuple(d["observed_cat"]),
            observed_cont=int(d["observed_cont"]),
        )


@dataclass(frozen=True)
class FeatureSchema:
    """Ordered features. Within each (role, kind) group the order here is the column order of the batch tensors."""

    features: tuple[Feature, ...]
    target: str  # "log_return" | "log_range"
    encoder_length: int
    horizon: int
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the target scaling mode

    def group(self, role: Role, kind: Kind) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.role == role and f.kind == kind)

    def names(self, role: Role, kind: Kind) -> list[str]:
        return [f.name for f in self.group(role, kind)]

    @property
    def sizes(self) -> InputSizes:
        cards = lambda role: tuple(f.cardinality for f in self.group(role, Kind.CATEGORICAL))  # noqa: E731
        n = lambda role: len(self.group(role, Kind.CONTINUOUS))  # noqa: E731
        return InputSizes(
            static_cat=cards(Role.STATIC),
            static_cont=n(Role.STATIC),
            known_cat=cards(Role.KNOWN),
            known_cont=n(Role.KNOWN),
            observed_cat=cards(Role.OBSERVED),
            observed_cont=n(Role.OBSERVED),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": [f.to_dict() for f in self.features],
            "target": self.target,
            "encoder_length": self.encoder_length,
            "horizon": self.horizon,
            "extra": dict(self.extra),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> FeatureSchema:
        return FeatureSchema(
            features=tuple(Feature.from_dict(f) for f in d["features"]),
            target=d["target"],
            encoder_length=int(d["encoder_length"]),
            horizon=int(d["horizon"]),
            extra=dict(d.get("extra", {})),
        )
