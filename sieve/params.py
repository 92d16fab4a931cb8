"""Parameter handling shared by defenses and attacks (scikit-learn's estimator contract):
``__init__`` only stores parameters, ``get_params``/``set_params`` read and change them, learned
attributes end in ``_``. Class metadata (``name``, ``paper``, ``needs``) is read by the registry."""
from __future__ import annotations

from typing import Any, ClassVar


class Params:
    name: ClassVar[str] = "base"
    paper: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()
    registry_name: str = ""

    def __init__(self, **params: Any) -> None:
        self._params = dict(params)
        for k, v in params.items():
            setattr(self, k, v)

    def get_params(self) -> dict[str, Any]:
        return dict(self._params)

    def set_params(self, **params: Any) -> "Params":
        self._params.update(params)
        for k, v in params.items():
            setattr(self, k, v)
        return self

    @property
    def label(self) -> str:
        """The registered name this object was created under (or the class's ``name``)."""
        return self.registry_name or self.name
