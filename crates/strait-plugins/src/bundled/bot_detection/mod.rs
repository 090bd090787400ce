//! `bot-detection` (Kong priority 2500): refuse user agents that match
//! `deny` or Kong's list of known bots, unless they match `allow`.

mod schema;

/// `bot-detection` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "bot-detection",
    priority: 2500,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(BotDetection::from_config(config)?)),
};

use std::sync::OnceLock;

use regex::{Regex, RegexSet};
use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

/// Kong's `bot-detection/rules.lua` (the same expressions).
const BOT_RULES: &[&str] = &[
    r"(Pingdom\.com_bot_version_)(\d+)\.(\d+)",
    r"(facebookexternalhit)/(\d+)\.(\d+)",
    r"Google.*/\+/web/snippet",
    r"(Twitterbot)/(\d+)\.(\d+)",
    r"\b(Boto3?|JetS3t|aws-(?:cli|sdk-(?:cpp|go|java|nodejs|ruby2?|dotnet-(?:\d{1,2}|core)))|s3fs)/(\d+)\.(\d+)(?:\.(\d+)|)",
    r" PTST/\d+(?:\.)?\d+$",
    r"/((?:Ant-)?Nutch|[A-z]+[Bb]ot|[A-z]+[Ss]pider|Axtaris|fetchurl|Isara|ShopSalad|Tailsweep)[ \-](\d+)(?:\.(\d+)(?:\.(\d+))?)?",
    r"\b(008|Altresium|Argus|BaiduMobaider|BoardReader|DNSGroup|DataparkSearch|EDI|Goodzer|Grub|INGRID|Infohelfer|LinkedInBot|LOOQ|Nutch|OgScrper|PathDefender|Peew|PostPost|Steeler|Twitterbot|VSE|WebCrunch|WebZIP|Y!J-BR[A-Z]|YahooSeeker|envolk|sproose|wminer)/(\d+)(?:\.(\d+)|)(?:\.(\d+)|)",
    r"(MSIE) (\d+)\.(\d+)([a-z]\d|[a-z]|);.* MSIECrawler",
    r"(Google-HTTP-Java-Client|Apache-HttpClient|Go-http-client|scalaj-http|http%20client|Python-urllib|HttpMonitor|TLSProber|WinHTTP|JNLP|okhttp|aihttp|reqwest|axios|unirest-(?:java|python|ruby|nodejs|php|net))(?:[ /](\d+)(?:\.(\d+)|)(?:\.(\d+)|)|)",
    r"(CSimpleSpider|Cityreview Robot|CrawlDaddy|CrawlFire|Finderbots|Index crawler|Job Roboter|KiwiStatus Spider|Lijit Crawler|QuerySeekerSpider|ScollSpider|Trends Crawler|USyd-NLP-Spider|SiteCat Webbot|BotName/\$BotVersion|123metaspider-Bot|1470\.net crawler|50\.nu|8bo Crawler Bot|Aboundex|Accoona-[A-z]{1,30}-Agent|AdsBot-Google(?:-[a-z]{1,30}|)|altavista|AppEngine-Google|archive.{0,30}\.org_bot|archiver|Ask Jeeves|[Bb]ai[Dd]u[Ss]pider(?:-[A-Za-z]{1,30})(?:-[A-Za-z]{1,30}|)|bingbot|BingPreview|blitzbot|BlogBridge|Bloglovin|BoardReader Blog Indexer|BoardReader Favicon Fetcher|boitho.com-dc|BotSeer|BUbiNG|\b\w{0,30}favicon\w{0,30}\b|\bYeti(?:-[a-z]{1,30}|)|Catchpoint(?: bot|)|[Cc]harlotte|Checklinks|clumboot|Comodo HTTP\(S\) Crawler|Comodo-Webinspector-Crawler|ConveraCrawler|CRAWL-E|CrawlConvera|Daumoa(?:-feedfetcher|)|Feed Seeker Bot|Feedbin|findlinks|Flamingo_SearchEngine|FollowSite Bot|furlbot|Genieo|gigabot|GomezAgent|gonzo1|(?:[a-zA-Z]{1,30}-|)Googlebot(?:-[a-zA-Z]{1,30}|)|Google SketchUp|grub-client|gsa-crawler|heritrix|HiddenMarket|holmes|HooWWWer|htdig|ia_archiver|ICC-Crawler|Icarus6j|ichiro(?:/mobile|)|IconSurf|IlTrovatore(?:-Setaccio|)|InfuzApp|Innovazion Crawler|InternetArchive|IP2[a-z]{1,30}Bot|jbot\b|KaloogaBot|Kraken|Kurzor|larbin|LEIA|LesnikBot|Linguee Bot|LinkAider|LinkedInBot|Lite Bot|Llaut|lycos|Mail\.RU_Bot|masscan|masidani_bot|Mediapartners-Google|Microsoft .{0,30} Bot|mogimogi|mozDex|MJ12bot|msnbot(?:-media {0,2}|)|msrbot|Mtps Feed Aggregation System|netresearch|Netvibes|NewsGator[^/]{0,30}|^NING|Nutch[^/]{0,30}|Nymesis|ObjectsSearch|OgScrper|Orbiter|OOZBOT|PagePeeker|PagesInventory|PaxleFramework|Peeplo Screenshot Bot|PlantyNet_WebRobot|Pompos|Qwantify|Read%20Later|Reaper|RedCarpet|Retreiver|Riddler|Rival IQ|scooter|Scrapy|Scrubby|searchsight|seekbot|semanticdiscovery|SemrushBot|Simpy|SimplePie|SEOstats|SimpleRSS|SiteCon|Slackbot-LinkExpanding|Slack-ImgProxy|Slurp|snappy|Speedy Spider|Squrl Java|Stringer|TheUsefulbot|ThumbShotsBot|Thumbshots\.ru|Tiny Tiny RSS|Twitterbot|WhatsApp|URL2PNG|Vagabondo|VoilaBot|^vortex|Votay bot|^voyager|WASALive.Bot|Web-sniffer|WebThumb|WeSEE:[A-z]{1,30}|WhatWeb|WIRE|WordPress|Wotbox|www\.almaden\.ibm\.com|Xenu(?:.s|) Link Sleuth|Xerka [A-z]{1,30}Bot|yacy(?:bot|)|YahooSeeker|Yahoo! Slurp|Yandex\w{1,30}|YodaoBot(?:-[A-z]{1,30}|)|YottaaMonitor|Yowedo|^Zao|^Zao-Crawler|ZeBot_www\.ze\.bz|ZooShot|ZyBorg)(?:[ /]v?(\d+)(?:\.(\d+)(?:\.(\d+)|)|)|)",
    r"(?:/[A-Za-z0-9\.]+|) {0,5}([A-Za-z0-9 \-_\!\[\]:]{0,50}(?:[Aa]rchiver|[Ii]ndexer|[Ss]craper|[Bb]ot|[Ss]pider|[Cc]rawl[a-z]{0,50}))[/ ](\d+)(?:\.(\d+)(?:\.(\d+)|)|)",
    r"(?:/[A-Za-z0-9\.]+|) {0,5}([A-Za-z0-9 \-_\!\[\]:]{0,50}(?:[Aa]rchiver|[Ii]ndexer|[Ss]craper|[Bb]ot|[Ss]pider|[Cc]rawl[a-z]{0,50})) (\d+)(?:\.(\d+)(?:\.(\d+)|)|)",
    r"((?:[A-z0-9]{1,50}|[A-z\-]{1,50} ?|)(?: the |)(?:[Ss][Pp][Ii][Dd][Ee][Rr]|[Ss]crape|[Cc][Rr][Aa][Ww][Ll])[A-z0-9]{0,50})(?:(?:[ /]| v)(\d+)(?:\.(\d+)|)(?:\.(\d+)|)|)",
];

fn bot_rules() -> Option<&'static RegexSet> {
    static RULES: OnceLock<Option<RegexSet>> = OnceLock::new();
    RULES
        .get_or_init(|| match RegexSet::new(BOT_RULES) {
            Ok(set) => Some(set),
            Err(error) => {
                tracing::error!(%error, "bot-detection rules do not compile");
                None
            }
        })
        .as_ref()
}

#[derive(Debug)]
pub struct BotDetection {
    allow: Vec<Regex>,
    deny: Vec<Regex>,
}

fn regexes(c: &ConfigReader<'_>, field: &str) -> Result<Vec<Regex>, PluginError> {
    c.strings(field)?
        .iter()
        .map(|r| Regex::new(r).map_err(|e| PluginError::invalid(field, format!("'{r}' is not a valid regex: {e}"))))
        .collect()
}

impl BotDetection {
    pub fn from_config(config: &Map<String, Value>) -> Result<BotDetection, PluginError> {
        let c = ConfigReader::new(config);
        Ok(BotDetection {
            allow: regexes(&c, "allow")?,
            deny: regexes(&c, "deny")?,
        })
    }

    /// True when the agent is refused.
    fn refuses(&self, agent: &str) -> bool {
        let agent = agent.trim();
        if self.allow.iter().any(|r| r.is_match(agent)) {
            return false;
        }
        if self.deny.iter().any(|r| r.is_match(agent)) {
            return true;
        }
        bot_rules().is_some_and(|rules| rules.is_match(agent))
    }
}

impl Plugin for BotDetection {
    fn name(&self) -> &'static str {
        "bot-detection"
    }

    fn priority(&self) -> i32 {
        2500
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let mut agents = ctx.headers.get_all("user-agent").iter();
        let agent = match (agents.next(), agents.next()) {
            (None, _) => return Flow::Continue,
            (Some(_), Some(_)) => {
                return Flow::Respond(PluginResponse::message(400, "Only one User-Agent header allowed"));
            }
            (Some(agent), None) => String::from_utf8_lossy(agent.as_bytes()).into_owned(),
        };
        if self.refuses(&agent) {
            return Flow::Respond(PluginResponse::message(403, "Forbidden"));
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kong_rules_compile_and_catch_known_bots() {
        assert!(bot_rules().is_some());
        let plugin = BotDetection {
            allow: vec![Regex::new("friendly-bot").expect("regex")],
            deny: vec![Regex::new("^evil").expect("regex")],
        };
        assert!(plugin.refuses("Googlebot/2.1 (+http://www.google.com/bot.html)"));
        assert!(!plugin.refuses("curl-evil"), "deny ^evil is anchored");
        assert!(plugin.refuses("evil-client/1.0"));
        assert!(!plugin.refuses("friendly-bot/1.0"));
        assert!(!plugin.refuses("Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"));
    }
}
