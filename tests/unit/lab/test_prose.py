from scripts.lab.prose import detection_sentence, health_check_rule


def test_health_check_rule_is_rays():
    threshold, default_s = health_check_rule()
    assert threshold == 3 and default_s == 10.0  # ray 2.60 ray/serve/_private/constants.py


def test_detection_sentence_is_rendered_from_the_values():
    text = detection_sentence(14.53, 31.2, 2, rule=(3, 10.0))
    assert "**14.5 s** after the crash" in text and "3 failed health checks" in text and "every 2 s" in text
    assert "at least 4 s" in text and "20 to 30 s" in text and "**31.2 s**" in text
