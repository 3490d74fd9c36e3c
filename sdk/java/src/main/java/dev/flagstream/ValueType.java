package dev.flagstream;

/** The type an evaluation asks for (for {@link FlagstreamClient#detailAt}). */
public enum ValueType {
    /** A bool flag: the value is a {@link Boolean}. */
    BOOL(0),
    /** An int flag: the value is a {@link Long}. */
    INT(1),
    /** A number flag (an int flag reads as one too): the value is a {@link Double}. */
    DOUBLE(2),
    /** A string flag: the value is a {@link String}. */
    STRING(3),
    /** A JSON flag: the value is a Map, List, String, Long/Double, Boolean or null. */
    JSON(4);

    /** {@code FLAGSTREAM_TYPE_*}. */
    final int code;

    ValueType(int code) {
        this.code = code;
    }
}
