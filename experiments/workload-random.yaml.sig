{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIyNWUyNDIzMzY1ZDUyYzdhYmY3OWZhN2NjZWRkMDBmM2Q1NmEzNjM5MjJlOWZhNDQwNGZkMGRiYTgzNDBjNmU3In0sIm5hbWUiOiJ3b3JrbG9hZC1yYW5kb20ueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "ysAo8EdhXfoeJxffqIVSA52y+JVo8mqBUl4ltcg2ar4mhwqaWTv0BXCvvYxhXpYT+sd4/2Q+H7UzxyWEkGyWAQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
