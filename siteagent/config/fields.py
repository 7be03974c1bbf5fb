"""How a configuration key is declared: a pydantic field whose one validator is a converter of
:mod:`siteagent.config.reading`, in a :class:`Section` model that reports every problem at once.

Invariant: a value is accepted only if its converter accepts it (no pydantic coercion: ``"5"``
is not an integer, ``true`` is not 1), and each problem is a line ``key.path: expected ...,
got ...`` with a "did you mean" for unknown keys. Values of a type no YAML document can hold
(a Path, a tuple) are taken as given: they come from code, which builds sections directly.
Recipe for a key: README, "A configuration key".
"""

from __future__ import annotations

from pathlib import Path
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    Optional,
    Tuple,
    TypeVar,
    get_args,
)

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from siteagent.config import reading
from siteagent.config.reading import Invalid, show, unknown_key_message

T = TypeVar("T")
S = TypeVar("S", bound="Section")

#: Types a YAML document cannot hold: values of them come from code, already converted.
TYPED = (Path, tuple)


def problem(loc: Tuple[Any, ...], message: str, raw: Any) -> InitErrorDetails:
    """One problem in pydantic's form (its text final: the loc is added when printed)."""
    return {"type": PydanticCustomError("config", message), "loc": loc, "input": raw}


def refuse(title: str, problems: List[InitErrorDetails]) -> ValidationError:
    return ValidationError.from_exception_data(title, problems)


def expected(exc: Invalid, raw: Any) -> str:
    return f"expected {exc}, got {show(raw)}"


def check(convert: Callable[[Any], T], *typed: type) -> PlainValidator:
    """A key's validator: ``convert`` alone decides (``typed``: more types taken as given)."""

    def validate(raw: Any) -> T:
        if isinstance(raw, (*TYPED, *typed)):
            return raw  # type: ignore[return-value]
        try:
            return convert(raw)
        except Invalid as exc:
            raise PydanticCustomError("config", expected(exc, raw)) from None

    return PlainValidator(validate)


def items(convert: Callable[[Any], T]) -> PlainValidator:
    """A list whose items are each converted; each bad item is named by its index."""

    def validate(raw: Any) -> Tuple[T, ...]:
        if isinstance(raw, tuple):
            return raw
        if not isinstance(raw, list):
            raise PydanticCustomError("config", expected(Invalid("a list"), raw))
        values: List[T] = []
        problems: List[InitErrorDetails] = []
        for index, item in enumerate(raw):
            try:
                values.append(convert(item))
            except Invalid as exc:
                problems.append(problem((index,), expected(exc, item), item))
        if problems:
            raise refuse("list", problems)
        return tuple(values)

    return PlainValidator(validate)


def path(
    kind: str = "path", *, optional: bool = False, exists_for: Tuple[str, ...] = ()
) -> PlainValidator:
    """A path relative to the file's directory (``optional``: or null); ``kind`` "file" (it
    must exist), "socket", or "path"; with ``exists_for``, it must exist only when the backend
    is one of those (and its commands run here: a ``command_prefix`` names another host's
    files)."""

    def validate(raw: Any, info: ValidationInfo) -> Optional[Path]:
        if (raw is None and optional) or isinstance(raw, Path):
            return raw
        context: Mapping[str, Any] = info.context or {}
        paths = reading.Paths(context.get("base_dir") or Path.cwd())
        used = context.get("backend") in exists_for and not context.get("remote")
        convert = getattr(paths, "existing_file" if used or kind == "file" else kind)
        try:
            return convert(raw)  # type: ignore[no-any-return]
        except Invalid as exc:
            raise PydanticCustomError("config", expected(exc, raw)) from None

    return PlainValidator(validate)


class Section(BaseModel):
    """One mapping of the file: its fields are its keys. A subclass may name ``derived``
    fields (set by code, not keys), ``renamed`` old keys still read (old: (new, why)), and
    ``checked_first`` keys whose problems are listed first (others' checks depend on them).
    It adds its cross-key checks in :meth:`relations`, and context-given values in
    :meth:`complete`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    derived: ClassVar[Tuple[str, ...]] = ()
    renamed: ClassVar[Dict[str, Tuple[str, str]]] = {}
    checked_first: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def key_names(cls) -> Tuple[str, ...]:
        """The YAML keys of this section (old names aside)."""
        return tuple(key for key in cls.model_fields if key not in cls.derived)

    @classmethod
    def default(cls, key: str) -> Any:
        return cls.model_fields[key].get_default(call_default_factory=True)

    @model_validator(mode="wrap")
    @classmethod
    def _read(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """Structure first (a mapping, known keys, required ones), then each value, then the
        relations between values, all reported together as the reader always has."""
        if isinstance(data, cls):
            return data
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise refuse(cls.__name__, [problem((), expected(Invalid(MAPPING), data), data)])
        context: Dict[str, Any] = info.context if info.context is not None else {}
        problems: List[InitErrorDetails] = []
        # code (no context) may set derived fields; a file may not
        derived = cls.derived if info.context is None else ()
        names = cls.key_names()
        known = (*names, *cls.renamed, *derived)
        fields: Dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                message = unknown_key_message(str(key), (*names, *cls.renamed))
                problems.append(problem((str(key),), message, value))
            elif key in cls.renamed:
                new = cls.renamed[key][0]
                if new not in data:
                    fields[new] = value
            else:
                fields[key] = value
        if info.context is not None:  # reading a file: absent sections are read too
            absent = [key for key in names if key not in fields and section_of(cls, key)]
            fields.update({key: {} for key in absent})
            fields.update(cls.complete(fields, context))
        absent = [k for k in names if k not in fields and cls.model_fields[k].is_required()]
        if absent:
            problems += cls.missing(absent, data)
        instance = None
        try:
            instance = handler(fields)
        except ValidationError as exc:
            problems += cls.renamed_back(data, values_of(exc, first=cls.checked_first))
        problems += cls.relations(data)
        if problems:
            raise refuse(cls.__name__, problems)
        return instance

    @classmethod
    def missing(cls, keys: List[str], data: Any) -> List[InitErrorDetails]:
        """The problems of required keys the file left out (by default one each)."""
        return [problem((key,), REQUIRED, data) for key in keys]

    @classmethod
    def complete(cls, fields: Mapping[str, Any], context: Dict[str, Any]) -> Dict[str, Any]:
        """Values this section takes from the context (or gives it), before validation."""
        return {}

    @classmethod
    def relations(cls, data: Mapping[str, Any]) -> List[InitErrorDetails]:
        """Problems between keys, checked on the file's values even when others are wrong."""
        return []

    @classmethod
    def renamed_back(
        cls, data: Mapping[str, Any], problems: List[InitErrorDetails]
    ) -> List[InitErrorDetails]:
        """Problems of a value given under an old key, named by the key the file used."""
        old_of = {new: old for old, (new, _) in cls.renamed.items() if old in data}
        for item in problems:
            loc = tuple(item["loc"])
            if loc and loc[0] in old_of and loc[0] not in data:
                item["loc"] = (old_of[loc[0]], *loc[1:])
        return problems


def entries(what: str, check_id: Callable[[str], object]) -> WrapValidator:
    """A mapping of ids to sections (``what`` names it in a problem): each id checked by
    ``check_id`` (a ValueError says why), each entry read, problems in the file's order."""

    def validate(raw: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(raw, Mapping):
            raise PydanticCustomError("config", expected(Invalid(what), raw))
        problems: List[InitErrorDetails] = []
        good: Dict[str, Any] = {}
        for key, entry in raw.items():
            try:
                check_id(str(key))
            except ValueError as exc:
                problems.append(problem((str(key),), str(exc), key))
            else:
                good[str(key)] = entry
        value = None
        try:
            value = handler(good)
        except ValidationError as exc:
            problems += values_of(exc)
        if problems:
            order = {str(key): index for index, key in enumerate(raw)}
            problems.sort(key=lambda item: order.get(str(item["loc"][0]), 0))
            raise refuse(what, problems)
        return value

    return WrapValidator(validate)


def section_of(cls: type[Section], key: str) -> Optional[type[Section]]:
    """The section model of ``cls``'s key ``key``, if it is a section."""
    annotation = cls.model_fields[key].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, Section) else None


def sections_in(cls: type[Section], key: str) -> Optional[type[Section]]:
    """The section model of the items of ``cls``'s key ``key``, if it is a list of sections."""
    args = [arg for arg in get_args(cls.model_fields[key].annotation) if isinstance(arg, type)]
    return args[0] if args and issubclass(args[0], Section) else None


MAPPING = "a mapping of keys to values"
REQUIRED = "expected a value: the key is required"


def values_of(exc: ValidationError, first: Tuple[str, ...] = ()) -> List[InitErrorDetails]:
    """The problems pydantic found, as problems (those of ``first`` keys first)."""
    found = [
        problem(tuple(error["loc"]), message_of(error), error.get("input"))
        for error in exc.errors()
        if not (error["type"] == "missing" and len(error["loc"]) == 1)
    ]
    return sorted(found, key=lambda item: 0 if item["loc"][:1] and item["loc"][0] in first else 1)


def message_of(error: Any) -> str:
    if error["type"] == "missing":
        return REQUIRED
    return str(error["msg"])


def path_of(loc: Tuple[Any, ...]) -> str:
    """A pydantic location as the key path the file uses (``a.b[2].c``)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def problems_of(exc: ValidationError) -> List[reading.Problem]:
    return [
        reading.Problem(path_of(tuple(error["loc"])), message_of(error)) for error in exc.errors()
    ]


def validated(cls: type[S], data: Any, context: Dict[str, Any], source: str) -> S:
    """``data`` as a ``cls``, or ConfigError naming every problem."""
    try:
        return cls.model_validate(data, context=context)
    except ValidationError as exc:
        raise reading.ConfigError(source, problems_of(exc)) from None
