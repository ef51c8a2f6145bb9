"""The FIBE paper's worked example (Appendix E, passage 28,011 about Bryan McClendon), line wrapping
undone: original text R, the create() completion, the exam it prints in E.3.2, an answer, and the
grader's completion for [s7]."""

PROMPT = "This is a Wikipedia passage about Bryan McClendon:"

SENTENCES = [
    "Bryan McClendon (born April 28, 1983) is an American football coach and former player.",
    "He is currently the offensive coordinator and quarterbacks coach at the University of Georgia.",
    "He previously served as the co-offensive coordinator and running backs coach at the University of South Carolina.",
    "McClendon played college football at the University of Georgia, where he was a four-year letterman and "
    "two-year starter at wide receiver.",
    "He was a member of the Bulldogs' 2002 SEC Championship team and the 2005 Sugar Bowl team.",
    "After his playing career, McClendon served as a graduate assistant at Georgia from 2006 to 2008.",
    "He then served as the wide receivers coach at the University of Tennessee from 2009 to 2011.",
    "In 2012, he returned to Georgia as the running backs coach.",
    "In 2014, he was promoted to co-offensive coordinator and running backs coach.",
    "In 2016, he left Georgia to become the co-offensive coordinator and running backs coach at South Carolina.",
    "In 2018, he returned to Georgia as the offensive coordinator and quarterbacks coach.",
]

_BLOCKS = [
    (
        "Bryan McClendon:person",
        "<April:month>, <28:day>, <1983:year>, <American:nationality>, "
        "<football coach:profession>, <former player:profession>",
    ),
    (
        "He:person",
        "<offensive coordinator:profession>, <quarterbacks coach:profession>, <University of Georgia:university>",
    ),
    (
        "He:person",
        "<co-offensive coordinator:profession>, <running backs coach:profession>, "
        "<University of South Carolina:university>",
    ),
    (
        "McClendon:person",
        "<college football:activity>, <University of Georgia:university>, "
        "<four-year:number of years>, <letterman:position>, <two-year:number of years>, <wide receiver:position>",
    ),
    ("He:person", "<Bulldogs:team>, <2002:year>, <SEC Championship:championship>, <2005:year>, <Sugar Bowl:game>"),
    ("McClendon:person", "<graduate assistant:profession>, <Georgia:university>, <2006:year>, <2008:year>"),
    ("He:person", "<wide receivers coach:profession>, <University of Tennessee:university>, <2009:year>, <2011:year>"),
    ("he:person", "<2012:year>, <Georgia:university>, <running backs coach:profession>"),
    ("he:person", "<2014:year>, <co-offensive coordinator:profession>, <running backs coach:profession>"),
    (
        "he:person",
        "<2016:year>, <Georgia:university>, <co-offensive coordinator:profession>, "
        "<running backs coach:profession>, <South Carolina:university>",
    ),
    (
        "he:person",
        "<2018:year>, <Georgia:university>, <offensive coordinator:profession>, <quarterbacks coach:profession>",
    ),
]

CREATE_COMPLETION = "\n\n".join(
    f"Text=[s{i}] {s}\nSubject=<{subject}>\nBlanks={blanks}"
    for i, (s, (subject, blanks)) in enumerate(zip(SENTENCES, _BLOCKS, strict=True))
)

# the exam as the paper prints it in the E.3.2 prompt example
PAPER_EXAM = [
    'Bryan McClendon (born "$month_3" "$day_4", "$year_0") is an "$nationality_5" "$profession_1" and "$profession_2".',
    'He is currently the "$profession_6" and "$profession_7" at the "$university_8".',
    'He previously served as the "$profession_9" and "$profession_11" at the "$university_10".',
    'McClendon played "$activity_12" at the "$university_8", where he was a "$number of years_13" "$position_14" '
    'and "$number of years_15" starter at "$position_16".',
    'He was a member of the "$team_17"\' "$year_18" "$championship_19" team and the "$year_20" "$game_21" team.',
    'After his playing career, McClendon served as a "$profession_22" at "$university_25" from "$year_23" to '
    '"$year_24".',
    'He then served as the "$profession_26" at the "$university_27" from "$year_28" to "$year_29".',
    'In 2012, he returned to "$university_25" as the "$profession_11".',
    'In 2014, he was promoted to "$profession_9" and "$profession_11".',
    'In 2016, he left "$university_25" to become the "$profession_9" and "$profession_11" at "$university_33".',
    'In 2018, he returned to "$university_25" as the "$profession_6" and "$profession_7".',
]

# the E.3.2 completion example
ANSWER_COMPLETION = """\
[s0] Bryan McClendon (born December 28, 1982) is an American football coach and former player.
[s1] He is currently the wide receivers coach and passing game coordinator at the University of Oregon.
[s2] He previously served as the wide receivers coach and co-offensive coordinator at the University of Georgia.
[s3] McClendon played college football at the University of Georgia, where he was a four-year wide receiver and \
two-year starter at quarterback.
[s4] He was a member of the 2002 SEC Championship team and the 2003 Sugar Bowl team.
[s5] After his playing career, McClendon served as a graduate assistant at the University of Georgia from 2006 to 2008.
[s6] He then served as the wide receivers coach at the University of Georgia from 2009 to 2015.
[s7] In 2012, he returned to the University of Georgia as the running backs coach.
[s8] In 2014, he was promoted to wide receivers coach and co-offensive coordinator.
[s9] In 2016, he left the University of Georgia to become the wide receivers coach and co-offensive coordinator at \
the University of South Carolina.
[s10] In 2018, he returned to the University of Georgia as the wide receivers coach and passing game coordinator."""

# E.3.3: the five students' answers for [s7] and the grader's completion
S7_STUDENTS = {
    "Tom": "In 2012, he returned to Georgia as the Wide Receivers Coach.",
    "Amy": "In 2012, he returned to Georgia as the running backs coach.",
    "Max": "In 2012, he returned to Georgia as the running backs coach.",
    "Leo": "In 2012, he returned to the University of Georgia as the running backs coach.",
    "Ava": "In 2012, he returned to the University of Georgia as the wide receivers coach.",
}
S7_GRADES = "[Tom] 0\n[Amy] 100\n[Max] 100\n[Leo] 75\n[Ava] 0"
