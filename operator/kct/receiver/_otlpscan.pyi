# (resource index, scope index, metric index, reason, rejected points, indices of the points to drop)
Drop = tuple[int, int, int, int, int, tuple[int, ...]]

NO_DATA: int
NO_NAME: int
NUMBER_WITHOUT_VALUE: int
HISTOGRAM_BUCKETS: int

def scan(
    data: bytes, point_attributes: bool, check_points: bool, /
) -> tuple[int, set[bytes], tuple[Drop, ...]] | None: ...
def valid(data: bytes, /) -> bool: ...
def schema() -> dict[str, dict[int, tuple[int, int, str]]]: ...
